"""The cases of benchmarks/bench.py: a floor, codetiming, the raw SDK and looptrace's forms.

Each case times whole steps of NAMES (20 sections) plus the step lap; looptrace's cases
include their share of `reset()` (one per RESET_EVERY steps).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import looptrace
from looptrace._stats.aggregator import Aggregator
from looptrace._stats.buckets import BOUNDARIES_S
from looptrace._stats.health import Incidents

# The OTLP receivers of the test suite, importable when run as `python benchmarks/bench.py`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class Sink(Protocol):
    """Where an OTLP exporter sends: a receiver in this process or a child, a stalled server."""

    @property
    def endpoint(self) -> str: ...


Sinks = dict[str, Sink]

NAMES = ("data", "forward", "backward", "optimizer") * 5  # 20 sections per step
PER_STEP = len(NAMES) + 1
RESET_EVERY = 100
QUEUE = 1 << 17  # room for a whole sample's spans: a full queue would drop, not export


class FloorTimer:
    """The floor: a minimal lap timer, perf_counter_ns and a dict of [count, total_ns]."""

    __slots__ = ("current", "started", "stats", "step_start")

    def __init__(self) -> None:
        self.stats: dict[str, list[int]] = {}
        self.current: str | None = None
        self.started = 0
        self.step_start = 0

    def _close(self, name: str, start: int, now: int) -> None:
        entry = self.stats.get(name)
        if entry is None:
            entry = self.stats[name] = [0, 0]
        entry[0] += 1
        entry[1] += now - start

    def record(self, name: str | None = None) -> None:
        now = time.perf_counter_ns()
        if self.current is not None:
            self._close(self.current, self.started, now)
            self.current = None
        if name is None:
            self._close("step", self.step_start, now)
            self.step_start = now
        else:
            self.current, self.started = name, now


class FloorSection:
    """The floor as a `with` block: a section's [count, total_ns], perf_counter_ns on each side.

    The least a pure-Python `with` timer costs: the block's two calls and two clock reads, against
    the floor's one call and one read per section.
    """

    __slots__ = ("entry", "started")

    def __init__(self, entry: list[int]) -> None:
        self.entry = entry
        self.started = 0

    def __enter__(self) -> FloorSection:
        self.started = time.perf_counter_ns()
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        entry = self.entry
        entry[0] += 1
        entry[1] += time.perf_counter_ns() - self.started


class DiscardExporter(SpanExporter):
    """Accepts every batch and drops it: the cost of the pipeline without a network."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


@dataclass
class Case:
    """A named workload: `run(steps)` times steps, `flush()` settles background work."""

    name: str
    run: Callable[[int], None]
    flush: Callable[[], object] = lambda: None
    close: Callable[[], object] = lambda: None
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def tracer_provider(kind: str, sinks: Sinks) -> TracerProvider:
    provider = TracerProvider()
    if kind == "discard":
        provider.add_span_processor(BatchSpanProcessor(DiscardExporter(), max_queue_size=QUEUE))
    elif kind in ("otlp", "stalled"):
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=sinks[kind].endpoint, insecure=True, timeout=2)
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=QUEUE))
    return provider


def floor_case() -> Case:
    timer = FloorTimer()

    def run(steps: int) -> None:
        record = timer.record
        for _ in range(steps):
            for name in NAMES:
                record(name)
            record()

    return Case("floor (30-line lap timer)", run)


def floor_with_case() -> Case:
    timer = FloorTimer()
    sections = {name: FloorSection(timer.stats.setdefault(name, [0, 0])) for name in NAMES}

    def run(steps: int) -> None:
        record = timer.record
        for _ in range(steps):
            for name in NAMES:
                with sections[name]:
                    pass
            record()

    return Case("floor as with blocks (20-line class)", run)


def codetiming_case() -> Case | None:
    try:
        from codetiming import Timer
    except ImportError:
        return None
    timers = {name: Timer(name=name, logger=None) for name in {*NAMES, "step"}}

    def run(steps: int) -> None:
        step = timers["step"]
        for _ in range(steps):
            with step:
                for name in NAMES:
                    with timers[name]:
                        pass

    return Case("codetiming (Timer, reused)", run)


def peer_case(
    make: Callable[[Sequence[str]], tuple[str, Callable[[int], None]] | None],
) -> Case | None:
    """A peer timer of `benchmarks/peers.py` timing the same steps, None if not installed."""
    made = make(NAMES)
    return None if made is None else Case(*made)


def raw_sdk_case(kind: str, sinks: Sinks) -> Case:
    provider = tracer_provider(kind, sinks)
    provider.add_span_processor(looptrace.AggregatingSpanProcessor(Aggregator(), Incidents()))
    tracer = provider.get_tracer("bench")
    # The same information looptrace puts on its spans: path, step and rank.
    rank = {"looptrace.rank": 0, "looptrace.world_size": 1}
    paths = {name: f"root.train.{name}" for name in NAMES}

    def run(steps: int) -> None:
        start_span, set_in = tracer.start_span, trace.set_span_in_context
        for i in range(steps):
            step = start_span(
                "step", attributes={"looptrace.path": "root.train", "looptrace.step": i, **rank}
            )
            context = set_in(step)
            for name in NAMES:
                attributes = {"looptrace.path": paths[name], "looptrace.step": i, **rank}
                start_span(name, context=context, attributes=attributes).end()
            step.end()

    return Case(
        f"raw SDK spans, {kind}",
        run,
        flush=provider.force_flush,
        close=provider.shutdown,
    )


class DiscardMetricExporter(MetricExporter):
    """Accepts every collection and drops it: an application's metric pipeline, no network."""

    def __init__(self) -> None:
        super().__init__()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def app_meter_provider() -> MeterProvider:
    """An application's MeterProvider: a periodic reader (hourly) and an exporter that drops."""
    reader = PeriodicExportingMetricReader(
        DiscardMetricExporter(), export_interval_millis=3_600_000
    )
    return MeterProvider(metric_readers=[reader], shutdown_on_exit=False)


def _per_value_recorder(provider: MeterProvider) -> Callable[[looptrace.Snapshot], None]:
    """The former path to an application's MeterProvider: `Histogram.record` per duration.

    Replayed at reset() from the window (one call per counted section, as it used to be).
    """
    histogram = provider.get_meter("looptrace").create_histogram(
        "looptrace.section.duration", unit="s", explicit_bucket_boundaries_advisory=BOUNDARIES_S
    )
    base = {"looptrace.rank": 0, "looptrace.world_size": 1}

    def record(snapshot: looptrace.Snapshot) -> None:
        for path, stats in snapshot.items():
            attributes = {"looptrace.path": path, "span.name": path.rsplit(".", 1)[-1], **base}
            for _ in range(stats.count):
                histogram.record(stats.mean, attributes)
        provider.force_flush()

    return record


def looptrace_case(form: str, kind: str, sinks: Sinks, meter: str | None = None, **kw: Any) -> Case:
    """A looptrace case; `meter` "reader" hands an application MeterProvider to configure(),
    "per-value" records every duration through its Histogram as looptrace used to."""
    provider = tracer_provider(kind, sinks)
    meter_provider = app_meter_provider() if meter else None
    lt = looptrace.configure(
        tracer_provider=provider,
        rank=looptrace.RankInfo(),
        meter_provider=meter_provider if meter == "reader" else None,
        **kw,
    )
    if meter == "per-value" and meter_provider is not None:
        lt._outputs.on_reset.append(_per_value_recorder(meter_provider))
    train = lt.timer("train")
    sections = {name: train.section(name) for name in NAMES}
    counter = [0]

    def run_record(steps: int) -> None:
        record = train.record
        for _ in range(steps):
            for name in NAMES:
                record(name)
            record()
            counter[0] += 1
            if counter[0] % RESET_EVERY == 0:
                lt.reset()

    def run_section(steps: int) -> None:
        for _ in range(steps):
            for name in NAMES:
                with sections[name]:
                    pass
            train.record()
            counter[0] += 1
            if counter[0] % RESET_EVERY == 0:
                lt.reset()

    def run_sections_only(steps: int) -> None:  # never lapped: each section is a step
        for _ in range(steps):
            for name in NAMES:
                with sections[name]:
                    pass
            counter[0] += 1
            if counter[0] % RESET_EVERY == 0:
                lt.reset()

    label = {0: "aggregate only", None: "default sampling"}.get(kw.get("trace_every"), "traced")
    label = label if kind == "none" else f"{label}, {kind}"
    label = label if meter is None else f"{label}, app meter {meter}"
    runs = {"record": run_record, "section": run_section, "sections-only": run_sections_only}
    return Case(
        f"looptrace {form}(), {label}",
        runs[form],
        flush=provider.force_flush,
        close=lambda: (
            lt.shutdown(),
            provider.shutdown(),
            meter_provider.shutdown() if meter_provider is not None else None,
        ),
    )
