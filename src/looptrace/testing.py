"""Test helpers: a fake clock and an in-memory capture of spans and metrics (a pytest plugin).

`pytest` loads this module as a plugin, so a test can ask for the `looptrace_capture` fixture::

    def test_forward(looptrace_capture):
        lt, clock = looptrace_capture.lt, looptrace_capture.clock
        lt.timer("train").record("forward")
        clock.advance(0.5)
        assert looptrace_capture.lt.reset()["root.train.forward"].total == 0.5
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from looptrace._configure import configure
from looptrace._core.clock import MANUAL_EPOCH_NS as _EPOCH_NS
from looptrace._core.clock import ManualClock
from looptrace._distributed.ranks import RankInfo
from looptrace._export.id_generator import StepIdGenerator
from looptrace._looptrace import Looptrace

__all__ = [
    "Capture",
    "FakeClock",
    "FakeDeviceClock",
    "FakeEvent",
    "capture",
    "looptrace_capture",
]

FakeClock = ManualClock  # the name tests know; the demo runs on the same clock


class FakeEvent:
    """An event of `FakeDeviceClock`: the device time at which it was recorded."""

    __slots__ = ("device_ns",)

    def __init__(self, device_ns: int) -> None:
        self.device_ns = device_ns


class FakeDeviceClock:
    """A device with a clock of its own, for testing device timers on the CPU.

    `advance(seconds)` stands for work the device runs; an event records the device time
    at which it is recorded. While `busy` is True, events report not done (`query`), as when
    kernels are still queued; a wait (`synchronize`) finishes them. `waits` counts the waits
    and `outstanding` the events handed out and not yet released.
    """

    def __init__(self) -> None:
        self.device_ns = 0
        self.busy = False
        self.waits = 0
        self.outstanding = 0

    def advance(self, seconds: float) -> None:
        """Let the device run `seconds` of work."""
        self.device_ns += round(seconds * 1e9)

    def record(self) -> FakeEvent:
        """Record an event at the current device time."""
        self.outstanding += 1
        return FakeEvent(self.device_ns)

    def query(self, event: FakeEvent) -> bool:
        """Return whether the device is done (not `busy`)."""
        return not self.busy

    def synchronize(self, event: FakeEvent) -> None:
        """Wait for the device: count it and finish the queued work."""
        self.waits += 1
        self.busy = False

    def elapsed_ns(self, start: FakeEvent, end: FakeEvent) -> int:
        """Return the device time between two events."""
        return end.device_ns - start.device_ns

    def release(self, event: FakeEvent) -> None:
        """Take an event back."""
        self.outstanding -= 1

    def synchronize_all(self) -> None:
        """Wait for the whole device."""
        self.synchronize(FakeEvent(self.device_ns))


@dataclass
class Capture:
    """A looptrace on a fake clock whose spans and metrics are kept in memory."""

    lt: Looptrace
    clock: FakeClock
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def finished_spans(self) -> list[ReadableSpan]:
        """Return the spans ended so far, in the order they ended."""
        return list(self.spans.get_finished_spans())

    def span_tree(self) -> list[dict[str, Any]]:
        """Return the spans as plain dicts (name, path, step, parent name, start/end in s)."""
        spans = self.finished_spans()
        names = {s.context.span_id: s.name for s in spans if s.context is not None}
        return [
            {
                "name": s.name,
                "path": (s.attributes or {}).get("looptrace.path"),
                "step": (s.attributes or {}).get("looptrace.step"),
                "parent": None if s.parent is None else names.get(s.parent.span_id, "?"),
                "start": ((s.start_time or 0) - _EPOCH_NS) / 1e9,
                "end": ((s.end_time or 0) - _EPOCH_NS) / 1e9,
                "status": s.status.status_code.name,
            }
            for s in spans
        ]


def capture(
    *,
    trace_every: int = 1,
    rank: RankInfo | None = None,
    clock: FakeClock | None = None,
    **kwargs: Any,
) -> Capture:
    """Configure a looptrace on a fake clock (fresh, at 0 s, by default) and in-memory exporters.

    Every step is traced unless `trace_every` says otherwise.
    """
    clock = FakeClock(start_s=0.0) if clock is None else clock
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(id_generator=StepIdGenerator())
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader(preferred_temporality={Histogram: AggregationTemporality.DELTA})
    meter_provider = MeterProvider(metric_readers=[reader])
    lt = configure(
        "looptrace-test",
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        clock=clock,
        trace_every=trace_every,
        rank=rank or RankInfo(),
        **kwargs,
    )
    return Capture(
        lt=lt,
        clock=clock,
        spans=spans,
        metrics=reader,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )


def _looptrace_capture() -> Iterator[Capture]:
    """Yield a looptrace on a fake clock at 0 s, spans and metrics in memory; shut it down."""
    result = capture()
    yield result
    result.lt.shutdown()


try:  # pytest is a test extra; the fake clock and `capture()` work without it
    import pytest
except ImportError:  # pragma: no cover - exercised only where pytest is absent
    pass
else:
    looptrace_capture = pytest.fixture(name="looptrace_capture")(_looptrace_capture)
