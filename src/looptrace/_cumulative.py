"""Running totals of every window since `configure()`: the numbers all metric exporters see.

Snapshots are windows (each `reset()` starts from zero); exporters want cumulative series, so
Prometheus counters only ever grow and a lost OTLP push loses nothing (the next carries the
totals). Beside the totals each path keeps the exact p50/p90/p99 of the latest window it ran
in, and per bucket the latest traced span that fell in it (an exemplar). The OTLP push and the
Prometheus endpoint both read this one object.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from looptrace import __version__
from looptrace._attributes import PATH, SPAN_NAME
from looptrace._buckets import BOUNDARIES_S
from looptrace._exemplars import ExemplarProcessor, TraceExemplar
from looptrace._metrics import DURATION_METRIC
from looptrace._snapshot import Snapshot

DROPPED_METRIC = "looptrace.spans.dropped"
WINDOW_METRIC = "looptrace.section.window.duration"
QUANTILE = "quantile"  # the attribute (label) naming which quantile a window point is
QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))  # label value, SectionStats field
DURATION_DESCRIPTION = "Duration of timed sections of the training or inference loop."
WINDOW_DESCRIPTION = (
    "Exact quantiles of section durations over the latest reset() window the section ran in."
)
DROPPED_DESCRIPTION = "Spans an exporter could not deliver (collector down, queue full)."


@dataclass(slots=True)
class Series:
    """Cumulative histogram of one section path."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(BOUNDARIES_S) + 1))
    count: int = 0
    sum: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    quantiles: tuple[float, ...] = ()  # p50, p90, p99 of the latest window with the path
    exemplars: dict[int, TraceExemplar] = field(default_factory=dict)  # by bucket index


class CumulativeHistograms:
    """Adds up the windows of one `Looptrace` and renders them as OpenTelemetry metrics data."""

    def __init__(
        self,
        resource: Resource,
        attributes: dict[str, int],
        dropped_spans: Callable[[], int],
        exemplars: ExemplarProcessor | None = None,
    ) -> None:
        self.resource = resource
        self.exemplars = exemplars
        self.attributes = attributes
        self.dropped_spans = dropped_spans
        self.start_ns: int | None = None
        self.time_ns = 0
        self.lock = threading.Lock()
        self._series: dict[str, Series] = {}

    def add(self, snapshot: Snapshot) -> None:
        """Add one window's statistics, and the exemplars of the spans that ended in it."""
        exemplars = {} if self.exemplars is None else self.exemplars.take(snapshot.end_ns)
        with self.lock:
            if self.start_ns is None:
                self.start_ns = snapshot.start_ns
            self.time_ns = max(self.time_ns, snapshot.end_ns)
            for path, stats in snapshot.items():
                series = self._series.get(path)
                if series is None:
                    series = self._series[path] = Series()
                for index, count in enumerate(stats.buckets):
                    series.buckets[index] += count
                series.count += stats.count
                series.sum += stats.total
                series.min = min(series.min, stats.min)
                series.max = max(series.max, stats.max)
                if stats.count:
                    series.quantiles = tuple(getattr(stats, name) for _, name in QUANTILES)
            for path, buckets in exemplars.items():
                series = self._series.get(path)
                if series is not None:
                    series.exemplars.update((i, e) for i, e in buckets.items() if series.buckets[i])

    def series(self) -> dict[str, Series]:
        """Return a copy of every path's cumulative series."""
        with self.lock:
            return {
                path: Series(
                    list(s.buckets), s.count, s.sum, s.min, s.max, s.quantiles, dict(s.exemplars)
                )
                for path, s in self._series.items()
            }

    def labels(self, path: str) -> dict[str, str | int]:
        """Return the metric attributes of a path: path, span name and rank."""
        return {PATH: path, SPAN_NAME: path.rsplit(".", 1)[-1], **self.attributes}

    def metrics_data(self) -> MetricsData | None:
        """Return the totals as cumulative OTLP metrics, or None before the first window."""
        series = self.series()
        with self.lock:
            start, now = self.start_ns, self.time_ns
        dropped = self.dropped_spans()
        if start is None:
            return None
        points = [
            HistogramDataPoint(
                attributes=self.labels(path),
                start_time_unix_nano=start,
                time_unix_nano=now,
                count=s.count,
                sum=s.sum,
                bucket_counts=s.buckets,
                explicit_bounds=BOUNDARIES_S,
                min=s.min,
                max=s.max,
                exemplars=[_otlp_exemplar(e) for _, e in sorted(s.exemplars.items())],
            )
            for path, s in series.items()
        ]
        window = Metric(
            name=WINDOW_METRIC,
            description=WINDOW_DESCRIPTION,
            unit="s",
            data=Gauge(
                data_points=[
                    NumberDataPoint(
                        attributes={**self.labels(path), QUANTILE: q},
                        start_time_unix_nano=start,
                        time_unix_nano=now,
                        value=value,
                    )
                    for path, s in series.items()
                    for (q, _), value in zip(QUANTILES, s.quantiles, strict=False)
                ]
            ),
        )
        duration = Metric(
            name=DURATION_METRIC,
            description=DURATION_DESCRIPTION,
            unit="s",
            data=Histogram(
                data_points=points,
                aggregation_temporality=AggregationTemporality.CUMULATIVE,
            ),
        )
        dropped_metric = Metric(
            name=DROPPED_METRIC,
            description=DROPPED_DESCRIPTION,
            unit="{span}",
            data=Sum(
                data_points=[
                    NumberDataPoint(
                        attributes=dict(self.attributes),
                        start_time_unix_nano=start,
                        time_unix_nano=now,
                        value=dropped,
                    )
                ],
                aggregation_temporality=AggregationTemporality.CUMULATIVE,
                is_monotonic=True,
            ),
        )
        scope = ScopeMetrics(
            scope=InstrumentationScope("looptrace", __version__),
            metrics=[duration, window, dropped_metric],
            schema_url="",
        )
        return MetricsData(
            resource_metrics=[
                ResourceMetrics(resource=self.resource, scope_metrics=[scope], schema_url="")
            ]
        )


def _otlp_exemplar(exemplar: TraceExemplar) -> Exemplar:
    return Exemplar(
        filtered_attributes={},
        value=exemplar.value,
        time_unix_nano=exemplar.time_ns,
        span_id=exemplar.span_id,
        trace_id=exemplar.trace_id,
    )
