"""The exporters' own log records: folded into one masked line per kind."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import looptrace
from looptrace._export import sdk_logs as _sdk_logs

from .helpers.ports import free_port
from .helpers.waiting import wait_until


def test_exporter_records_are_folded_once_per_kind_with_header_values_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ten failures of one kind: one INFO line on looptrace.sdk, the token masked, nothing else."""
    import looptrace._export.otlp  # noqa: F401 - creates the exporters' loggers

    secret = "Bearer s3cr3t-token-value"
    _sdk_logs.fold([secret])
    exporter = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    caplog.set_level(logging.DEBUG)
    with _sdk_logs.ours():  # what looptrace's own exporters log
        for attempt in range(10):
            exporter.error(
                "Failed to export batch, headers %s, attempt %d", {"auth": secret}, attempt
            )
        logging.getLogger("opentelemetry.sdk._shared_internal").warning(
            "Queue full (test), dropping %s.", "x"
        )
    _sdk_logs.release()
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "looptrace.sdk",
            "INFO",
            "looptrace: an OpenTelemetry exporter reported: Failed to export batch, headers "
            "{'auth': '***'}, attempt 0 (further reports like it are not logged; lost spans are "
            "counted in lt.health().dropped_spans)",
        ),
        (
            "looptrace.sdk",
            "INFO",
            "looptrace: an OpenTelemetry exporter reported: Queue full (test), dropping x. "
            "(further reports like it are not logged; lost spans are counted in "
            "lt.health().dropped_spans)",
        ),
    ]


def _fold_filters() -> list[logging.Filter]:
    names = [n for n in logging.root.manager.loggerDict if n.startswith("opentelemetry")]
    return [
        f
        for name in names
        for f in logging.getLogger(name).filters
        if isinstance(f, _sdk_logs._Fold)  # type: ignore[attr-defined]
    ]


def test_an_application_exporter_beside_looptrace_logs_unchanged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The app's OTLP exporter fails beside looptrace's: its records pass as they are; ours fold."""
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: both exporters fail
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        otlp_endpoint=dead,
        otlp_protocol="http/protobuf",
        otlp_timeout=1,
        metrics_exporter="none",
        trace_every=1,
    )
    app_provider = TracerProvider()
    app_exporter = OTLPSpanExporter(endpoint=f"{dead}/v1/traces", timeout=1)
    app_provider.add_span_processor(SimpleSpanProcessor(app_exporter))
    caplog.set_level(logging.INFO)
    with lt.timer("train").section("step"):
        pass
    app_provider.get_tracer("app").start_span("request").end()  # exported on this thread
    lt.shutdown()
    app_provider.shutdown()
    # the app's failure as its SDK logs it: the exporter's logger, or the span processor's
    # where an older SDK's HTTP exporter raises
    app_records = [r for r in caplog.records if r.name.startswith("opentelemetry.")]
    assert app_records
    assert {r.levelno for r in app_records} >= {logging.ERROR}
    assert lt.health().dropped_spans > 0  # looptrace's own failures: counted, and
    folded = {r.levelno for r in caplog.records if r.name == "looptrace.sdk"}
    assert folded <= {logging.INFO}  # at most one INFO line per kind
    # shutdown() takes the filter off, once looptrace's exporter has given up retrying
    assert wait_until(lambda: _fold_filters() == [], 10)


def test_the_filter_stays_while_another_looptrace_exports() -> None:
    """Two pipelines fold; the filter leaves the SDK's loggers with the last shutdown only."""
    dead = f"http://127.0.0.1:{free_port()}"
    first, second = (
        looptrace.configure(
            tracer_provider=TracerProvider(),
            otlp_endpoint=dead,
            otlp_protocol="http/protobuf",
            otlp_timeout=1,
            metrics_exporter="none",
        )
        for _ in range(2)
    )
    first.shutdown()
    assert _fold_filters()
    second.shutdown()
    assert _fold_filters() == []
