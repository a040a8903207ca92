"""OTLP export over gRPC and HTTP to a receiver speaking the real protocol."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import looptrace
from looptrace.testing import FakeClock

from .helpers.otlp_server import OtlpReceiver, wait_until
from .helpers.processes import bare_env

PROTOCOLS = ["grpc", "http/protobuf"]
BOUNDS = list(looptrace.Snapshot.boundaries)


@pytest.fixture(params=PROTOCOLS)
def receiver(request: pytest.FixtureRequest) -> Iterator[OtlpReceiver]:
    """Yield a running receiver for each protocol."""
    with OtlpReceiver(request.param) as rx:
        yield rx


def run_steps(lt: looptrace.Looptrace, clock: FakeClock, steps: int) -> None:
    """Run `steps` laps of data (0.1 s) and forward (0.2 s) under `train`."""
    train = lt.timer("train")
    for _ in range(steps):
        train.record("data")
        clock.advance(0.1)
        train.record("forward")
        clock.advance(0.2)
        train.record()
    train.stop()


def test_spans_arrive_with_their_ids_parents_and_attributes(receiver: OtlpReceiver) -> None:
    """Every span reaches the receiver once, with the ids and parents the SDK gave it."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=provider,
        clock=clock,
        otlp_endpoint=receiver.endpoint,
        otlp_protocol=receiver.protocol,
    )
    run_steps(lt, clock, 3)
    lt.shutdown()

    def key(span: dict[str, Any]) -> tuple[str, str, str | None]:
        return (span["trace_id"], span["span_id"], span["parent"])

    expected = sorted(
        (
            f"{s.context.trace_id:032x}",
            f"{s.context.span_id:016x}",
            None if s.parent is None else f"{s.parent.span_id:016x}",
        )
        for s in memory.get_finished_spans()
        if s.context is not None
    )
    assert sorted(key(s) for s in receiver.spans) == expected
    by_id = {s["span_id"]: s for s in receiver.spans}
    tree = sorted(
        (
            s["attributes"]["looptrace.step"],
            s["name"],
            s["attributes"]["looptrace.path"],
            None if s["parent"] is None else by_id[s["parent"]]["name"],
            s["attributes"]["looptrace.rank"],
            s["attributes"]["looptrace.world_size"],
            round((s["end"] - s["start"]) / 1e9, 9),
        )
        for s in receiver.spans
    )
    assert tree == [
        *[
            row
            for step in range(3)
            for row in (
                (step, "data", "root.train.data", "train", 0, 1, 0.1),
                (step, "forward", "root.train.forward", "train", 0, 1, 0.2),
                (step, "train", "root.train", None, 0, 1, 0.3),
            )
        ],
        (3, "train", "root.train", None, 0, 1, 0.0),
    ]
    assert lt.health().dropped_spans == 0


def test_metrics_are_pushed_cumulative_at_each_reset(receiver: OtlpReceiver) -> None:
    """Each reset pushes running totals: explicit second buckets, one start time, min/max."""
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        clock=clock,
        otlp_endpoint=receiver.endpoint,
        otlp_protocol=receiver.protocol,
        traces_exporter="none",
    )
    run_steps(lt, clock, 2)
    first = lt.reset()
    assert receiver.wait_for_metrics(lambda m: "root.train.data" in m["looptrace.section.duration"])
    clock.advance(1.0)
    lt.timer("train").record("data")
    clock.advance(0.004)
    lt.timer("train").stop()
    second = lt.reset()
    assert receiver.wait_for_metrics(
        lambda m: m["looptrace.section.duration"]["root.train.data"]["count"] == 3
    )
    lt.shutdown()
    data = receiver.latest_metrics()
    labels = {"looptrace.rank": 0, "looptrace.world_size": 1}
    buckets = [0] * (len(BOUNDS) + 1)
    buckets[BOUNDS.index(0.004)] = 1  # 0.004 s falls in (0.0025, 0.004]
    buckets[BOUNDS.index(0.1)] = 2  # 0.1 s falls in (0.063, 0.1]
    point = data["looptrace.section.duration"]["root.train.data"]
    exemplars = point.pop("exemplars")
    assert point == {
        "attributes": {"looptrace.path": "root.train.data", "span.name": "data", **labels},
        "start": first.start_ns,
        "time": second.end_ns,
        "count": 3,
        "sum": 0.204,
        "buckets": buckets,
        "bounds": BOUNDS,
        "min": 0.004,
        "max": 0.1,
    }
    # The latest traced span of each bucket: step 1's data, then the last one.
    assert [(e["value"], e["time"]) for e in exemplars] == [
        (0.004, second.end_ns),
        (pytest.approx(0.1), first.start_ns + 400_000_000),
    ]
    assert all(len(e["trace_id"]) == 32 and len(e["span_id"]) == 16 for e in exemplars)
    window = data["looptrace.section.window.duration"]
    assert {key: point for key, point in window.items() if key.startswith("root.train.data")} == {
        f"root.train.data q{q}": {
            "attributes": {
                "looptrace.path": "root.train.data",
                "span.name": "data",
                "quantile": q,
                **labels,
            },
            "start": 0,  # a gauge point has no start time in OTLP
            "time": second.end_ns,
            "value": 0.004,  # the second window's only data section
        }
        for q in ("0.5", "0.9", "0.99")
    }
    assert data["looptrace.section.duration"]["_temporality"] == 2  # CUMULATIVE
    assert data["looptrace.spans.dropped"] == {
        "": {"attributes": labels, "start": first.start_ns, "time": second.end_ns, "value": 0},
        "_temporality": 2,
        "_monotonic": True,
    }
    assert receiver.spans == []


def test_headers_and_compression_reach_the_receiver(receiver: OtlpReceiver) -> None:
    """otlp_headers go with every request; gzip bodies are decoded by the receiver."""
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        clock=clock,
        otlp_endpoint=receiver.endpoint,
        otlp_protocol=receiver.protocol,
        otlp_headers="x-tenant=team%20a,authorization=Bearer abc",
        otlp_compression="gzip",
    )
    run_steps(lt, clock, 1)
    lt.shutdown()
    assert len(receiver.spans) == 4
    assert {(h["x-tenant"], h["authorization"]) for h in receiver.headers} == {
        ("team a", "Bearer abc")
    }


def test_console_exporter_prints_the_spans(capfd: pytest.CaptureFixture[str]) -> None:
    """traces_exporter="console" writes each span as JSON to standard output."""
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(), clock=clock, traces_exporter="console"
    )
    run_steps(lt, clock, 1)
    lt.shutdown()
    out, names = capfd.readouterr().out, []
    decoder, position = json.JSONDecoder(), 0
    while out[position:].strip():
        span, position = decoder.raw_decode(out, position)
        names.append(span["name"])
        position += len(out[position:]) - len(out[position:].lstrip())
    assert names == [
        "data",
        "forward",
        "train",
        "train",
    ]


ENV_PROGRAM = """
    import looptrace
    from looptrace.testing import FakeClock
    clock = FakeClock()
    lt = looptrace.configure("from-env", clock=clock)
    t = lt.timer("train")
    t.record("data"); clock.advance(0.5); t.stop()
    lt.reset()
    lt.shutdown()
    print(lt.health().dropped_spans)
"""


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_standard_variables_configure_an_own_provider(protocol: str) -> None:
    """With no arguments, OTEL_EXPORTER_OTLP_* set up export of looptrace's own provider."""
    with OtlpReceiver(protocol) as rx:
        out = _run(
            ENV_PROGRAM,
            OTEL_EXPORTER_OTLP_ENDPOINT=rx.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
            OTEL_EXPORTER_OTLP_HEADERS="x-team=ml",
        )
        assert rx.wait_for_metrics(lambda m: "root.train.data" in m["looptrace.section.duration"])
    assert out == "0"
    assert sorted((s["name"], s["resource"]["service.name"]) for s in rx.spans) == [
        ("data", "from-env"),
        ("train", "from-env"),
    ]
    assert {h["x-team"] for h in rx.headers} == {"ml"}


APP_TRACER = """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
"""
APP_METER = """
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    metrics.set_meter_provider(MeterProvider())
"""


@pytest.mark.parametrize(
    ("setup", "exported"),
    [
        (APP_TRACER, {"spans": 0, "data sections in metrics": 1}),
        (APP_TRACER + APP_METER, {"spans": 0, "data sections in metrics": None}),
    ],
    ids=["app-tracer", "app-tracer-and-meter"],
)
def test_variables_leave_the_applications_pipelines_alone(
    setup: str, exported: dict[str, int]
) -> None:
    """OTEL_* variables add no looptrace exporter to a pipeline the application set up."""
    with OtlpReceiver("http/protobuf") as rx:
        out = _run(
            textwrap.dedent(setup) + textwrap.dedent(ENV_PROGRAM),
            OTEL_EXPORTER_OTLP_ENDPOINT=rx.endpoint,
        )
    assert out == "0"
    metrics = rx.latest_metrics()["looptrace.section.duration"] if rx.metric_requests else {}
    data = metrics.get("root.train.data", {}).get("count")
    assert {"spans": len(rx.spans), "data sections in metrics": data} == exported


def test_sdk_disabled_exports_nothing() -> None:
    """OTEL_SDK_DISABLED=true turns every exporter off, even with an endpoint configured."""
    with OtlpReceiver("http/protobuf") as rx:
        out = _run(ENV_PROGRAM, OTEL_SDK_DISABLED="true", OTEL_EXPORTER_OTLP_ENDPOINT=rx.endpoint)
    assert (out, rx.spans, rx.metric_requests) == ("0", [], [])


def _run(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        env=bare_env(env),
        timeout=60,
    )
    return result.stdout.strip()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_step_traced_at_full_speed_loses_no_span(protocol: str) -> None:
    """1000 steps of 20 sections at trace_every=1, as fast as looptrace goes: all arrive."""
    with OtlpReceiver(protocol, keep_spans=False) as rx:
        clock = FakeClock()
        lt = looptrace.configure(
            tracer_provider=TracerProvider(),
            clock=clock,
            trace_every=1,
            otlp_endpoint=rx.endpoint,
            otlp_protocol=protocol,
        )
        train = lt.timer("train")
        for _ in range(1000):
            for section in range(20):
                train.record(f"s{section}")
                clock.advance(0.001)
            train.record()
        train.stop()
        dropped_in_loop = lt.health().dropped_spans
        lt.shutdown()
        wait_until(lambda: rx.span_count >= 21_001, timeout=30)
    assert (dropped_in_loop, lt.health().dropped_spans, rx.span_count) == (0, 0, 21_001)
