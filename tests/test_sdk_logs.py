"""The exporters' own log records: folded into one masked line per kind."""

from __future__ import annotations

import logging

import pytest

from looptrace._export import sdk_logs as _sdk_logs


def test_exporter_records_are_folded_once_per_kind_with_header_values_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ten failures of one kind: one INFO line on looptrace.sdk, the token masked, nothing else."""
    import looptrace._export.otlp  # noqa: F401 - creates the exporters' loggers

    secret = "Bearer s3cr3t-token-value"
    _sdk_logs.fold([secret])
    exporter = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    caplog.set_level(logging.DEBUG)
    for attempt in range(10):
        exporter.error("Failed to export batch, headers %s, attempt %d", {"auth": secret}, attempt)
    logging.getLogger("opentelemetry.sdk._shared_internal").warning(
        "Queue full (test), dropping %s.", "x"
    )
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
