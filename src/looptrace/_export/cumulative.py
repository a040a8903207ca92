"""Running totals of every window since `configure()`: the numbers all metric exporters see.

Snapshots are windows (each `reset()` starts from zero); exporters want cumulative series, so
Prometheus counters only ever grow and a lost OTLP push loses nothing (the next carries the
totals). Beside the totals each path keeps the p50/p90/p99 of the latest window it ran in
(its snapshot's: exact up to 1,023 intervals, within 1 % beyond), and per bucket the latest
traced span that fell in it (an exemplar). The OTLP push, the Prometheus endpoint and an
application's metric readers all read this one object; a reader that prefers delta
temporality gets a `DeltaCursor` of its own.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from dataclasses import dataclass, field

from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Buckets,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
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

from looptrace._export.coalesced import Coalesced
from looptrace._export.exemplars import ExemplarProcessor, TraceExemplar
from looptrace._export.exponential import SCALE, HistogramKind, add_counts, dense, window_counts
from looptrace._export.job_metrics import job_metrics, memory_metrics, rank_metrics
from looptrace._export.metrics import (
    DROPPED_DESCRIPTION,
    DROPPED_METRIC,
    DURATION_DESCRIPTION,
    DURATION_METRIC,
    ITEMS,
    ITEMS_DESCRIPTION,
    ITEMS_METRIC,
    ITEMS_RATE,
    ITEMS_RATE_DESCRIPTION,
    ITEMS_RATE_METRIC,
    QUANTILE,
    QUANTILES,
    SECONDS,
    SPANS,
    WINDOW_DESCRIPTION,
    WINDOW_METRIC,
    item_attributes,
    section_attributes,
)
from looptrace._export.window_queue import WindowQueue
from looptrace._stats.buckets import BOUNDARIES_S
from looptrace._stats.health import Incidents
from looptrace._stats.job import JobHistogram
from looptrace._stats.snapshot import SectionStats, Snapshot
from looptrace._stats.spread import RateSpread
from looptrace._stats.straggler import RankFigures, Straggler
from looptrace._stats.version import version

CUMULATIVE = AggregationTemporality.CUMULATIVE
DELTA = AggregationTemporality.DELTA


@dataclass(slots=True)
class Series:
    """Histogram of one section path over the windows added to it."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(BOUNDARIES_S) + 1))
    count: int = 0
    sum: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    quantiles: tuple[float, ...] = ()  # p50, p90, p99 of the latest window with the path
    exemplars: dict[int, TraceExemplar] = field(default_factory=dict)  # by bucket index
    exponential: dict[int, int] = field(default_factory=dict)  # count per exponential bucket

    def add(self, stats: SectionStats) -> None:
        """Add one window's statistics of the path."""
        for index, count in enumerate(stats.buckets):
            self.buckets[index] += count
        self.count += stats.count
        self.sum += stats.total
        self.min = min(self.min, stats.min)
        self.max = max(self.max, stats.max)
        if stats.count:
            self.quantiles = tuple(getattr(stats, name) for _, name in QUANTILES)

    def add_job(self, job: JobHistogram) -> None:
        """Add one cross-rank window's histogram of the path over the job."""
        for index, count in enumerate(job.buckets):
            self.buckets[index] += count
        self.count += job.count
        self.sum += job.sum
        self.min = min(self.min, job.min)
        self.max = max(self.max, job.max)
        if job.count:
            self.quantiles = job.quantiles

    def copy(self) -> Series:
        """Return an independent copy."""
        return Series(
            list(self.buckets),
            self.count,
            self.sum,
            self.min,
            self.max,
            self.quantiles,
            dict(self.exemplars),
            dict(self.exponential),
        )


@dataclass(slots=True)
class Totals:
    """Series per path over the windows from `start_ns` to `time_ns`.

    `items` holds the units counted per (path, unit) over the windows, `rates` their units
    per second in the latest window that counted them. `outside_wait_s` adds up this rank's
    lap time outside wait sections. On the rank that serves the job's series, `job` holds
    the job's series per path over the cross-rank windows and `straggler` the latest one's,
    and `job_rates` per (path, unit) its spread over the ranks in the latest cross-rank
    window that counted it.
    """

    start_ns: int | None = None
    time_ns: int = 0
    series: dict[str, Series] = field(default_factory=dict)
    items: dict[tuple[str, str], float] = field(default_factory=dict)
    rates: dict[tuple[str, str], float] = field(default_factory=dict)
    outside_wait_s: float = 0.0
    job: dict[str, Series] = field(default_factory=dict)
    straggler: Straggler | None = None
    memory: dict[str, float] = field(default_factory=dict)  # the latest window's, in bytes
    job_rates: dict[tuple[str, str], RateSpread] = field(default_factory=dict)

    def copy(self) -> Totals:
        """Return an independent copy."""
        return Totals(
            self.start_ns,
            self.time_ns,
            {path: s.copy() for path, s in self.series.items()},
            dict(self.items),
            dict(self.rates),
            self.outside_wait_s,
            {path: s.copy() for path, s in self.job.items()},
            self.straggler,
            dict(self.memory),
            dict(self.job_rates),
        )

    def add(
        self,
        snapshot: Snapshot,
        exemplars: dict[str, dict[int, TraceExemplar]],
        exponential: dict[str, dict[int, int]],
    ) -> None:
        """Add one window, the exemplars of the spans that ended in it, its exponential counts."""
        if self.start_ns is None:
            self.start_ns = snapshot.start_ns
        self.time_ns = max(self.time_ns, snapshot.end_ns)
        for path, stats in snapshot.items():
            series = self.series.get(path)
            if series is None:
                series = self.series[path] = Series()
            series.add(stats)
            counts = exponential.get(path)
            if counts:
                add_counts(series.exponential, counts)
        for path, buckets in exemplars.items():
            series = self.series.get(path)
            if series is not None:
                series.exemplars.update((i, e) for i, e in buckets.items() if series.buckets[i])
        for path, units in snapshot.rates.items():
            for unit, rate in units.items():
                key = (path, unit)
                self.items[key] = self.items.get(key, 0.0) + rate.total
                if not math.isnan(rate.per_s):
                    self.rates[key] = rate.per_s
        self._add_rank(snapshot)

    def _add_rank(self, snapshot: Snapshot) -> None:
        """Add a window's figures of this rank (its lap time, its memory) and of the job."""
        self.outside_wait_s += RankFigures.of(snapshot, snapshot.roles).outside_s
        if snapshot.memory is not None:
            self.memory = {
                name.removesuffix("_bytes"): value
                for name, value in snapshot.memory.metrics().items()
                if name.endswith("_bytes")
            }
        job = snapshot.job
        if job is not None and job.serves_job:
            for path, histogram in job.histograms.items():
                series = self.job.get(path)
                if series is None:
                    series = self.job[path] = Series()
                series.add_job(histogram)
            self.straggler = snapshot.straggler
            for path, units in (snapshot.rates_across_ranks or {}).items():
                self.job_rates.update(((path, unit), s) for unit, s in units.items())


class DeltaCursor:
    """What was added since the previous `take()`, for a reader that wants delta temporality."""

    def __init__(self, histograms: CumulativeHistograms) -> None:
        self._histograms = histograms
        self.pending = Totals()
        self._dropped = 0
        self._last_ns: int | None = None

    def take(self) -> tuple[Totals, int]:
        """Return the windows added since the last take and the spans dropped meanwhile.

        Nothing is taken while no window was added (`start_ns` None). The caller holds the
        histograms' lock.
        """
        if self.pending.start_ns is None:
            return self.pending, 0
        taken, self.pending = self.pending, Totals()
        if self._last_ns is not None:
            taken.start_ns = self._last_ns
        self._last_ns = taken.time_ns
        dropped = self._histograms.dropped_spans()
        delta, self._dropped = dropped - self._dropped, dropped
        return taken, delta


class CumulativeHistograms:
    """Adds up the windows of one `Looptrace` and renders them as OpenTelemetry metrics data.

    `reset()` only queues its window (`add`); a thread of looptrace's adds the queued windows
    up, in order, and so does whoever reads the totals first (a scrape, a push, a reader's
    collection), so a reader always sees every window closed before it read.
    """

    def __init__(
        self,
        resource: Resource,
        attributes: dict[str, int],
        incidents: Incidents,
        exemplars: ExemplarProcessor | None = None,
        histogram: HistogramKind = "explicit",
    ) -> None:
        self.resource = resource
        self.histogram = histogram
        self.exemplars = exemplars
        self.attributes = attributes
        self.incidents = incidents
        self.lock = threading.Lock()  # held while adding up and while reading the totals
        # Whether this rank serves its full per-section detail: as the latest cross-rank
        # window decided (`JobView.detail`), every rank until one did.
        self.detail = True
        self._totals = Totals()
        self._cursors: list[DeltaCursor] = []
        self._queue = WindowQueue(incidents, "the metric totals")
        self._folds = Coalesced(self._fold_queued, "looptrace-metric-totals")
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def renew() -> None:  # another thread may have held a lock while forking
                histograms = ref()
                if histograms is not None:
                    histograms.lock = threading.Lock()
                    histograms._queue.after_fork_in_child()
                    histograms._folds.after_fork_in_child(closed=histograms._folds.closed)

            os.register_at_fork(after_in_child=renew)

    def dropped_spans(self) -> int:
        """Return the spans the exporters failed to deliver so far."""
        return self.incidents.dropped_spans

    def add(self, snapshot: Snapshot) -> None:
        """Queue one window to be added up off the caller's thread; constant work."""
        self._queue.put(snapshot)
        self._folds.request()

    def close(self) -> None:
        """Stop the thread once it is idle; what is still queued waits for the next reader."""
        self._folds.close()

    def _fold_queued(self, _ticket: int) -> None:
        try:
            with self.lock:
                self._add_queued()
        except Exception:
            self.incidents.failed("adding up the metric totals")

    def _add_queued(self) -> None:
        """Add the queued windows, oldest first, to the totals and every cursor.

        The caller holds `lock`. Each window takes the exemplars of the spans that ended in
        it: a timer's window only its own paths'.
        """
        windows, _dropped = self._queue.take()  # a dropped window is counted in health()
        for snapshot in windows:
            paths = None if snapshot.subtree == "root" else snapshot
            exemplars = (
                {} if self.exemplars is None else self.exemplars.take(snapshot.end_ns, paths)
            )
            exponential = window_counts(snapshot) if self.histogram == "exponential" else {}
            snapshot.release_distributions()
            if snapshot.job is not None and snapshot.job.detail is not None:
                self.detail = snapshot.job.detail
            self._totals.add(snapshot, exemplars, exponential)
            for cursor in self._cursors:
                cursor.pending.add(snapshot, exemplars, exponential)

    def delta_cursor(self) -> DeltaCursor:
        """Return a new cursor that collects every window added from now on."""
        cursor = DeltaCursor(self)
        with self.lock:
            self._add_queued()
            self._cursors.append(cursor)
        return cursor

    def series(self) -> dict[str, Series]:
        """Return a copy of every path's cumulative series."""
        with self.lock:
            self._add_queued()
            return {path: s.copy() for path, s in self._totals.series.items()}

    def totals(self) -> Totals:
        """Return a copy of the totals: series, units counted and their latest rates."""
        return self.view()[0]

    def view(self) -> tuple[Totals, bool]:
        """Return a copy of the totals and whether this rank serves its full detail."""
        with self.lock:
            self._add_queued()
            return self._totals.copy(), self.detail

    def labels(self, path: str) -> dict[str, str | int]:
        """Return the metric attributes of a path: path, span name and rank."""
        return section_attributes(path, self.attributes)

    def metrics_data(self) -> MetricsData | None:
        """Return the totals as cumulative OTLP metrics, or None before the first window."""
        scope = self.scope_metrics()
        if scope is None:
            return None
        return MetricsData(
            resource_metrics=[
                ResourceMetrics(resource=self.resource, scope_metrics=[scope], schema_url="")
            ]
        )

    def scope_metrics(self, cursor: DeltaCursor | None = None) -> ScopeMetrics | None:
        """Return looptrace's metrics: cumulative totals, or the delta since `cursor` last took.

        None when there is nothing to report (no window added yet, or none since the cursor
        last took).
        """
        dropped = self.dropped_spans()
        with self.lock:
            self._add_queued()
            detail = self.detail
            if cursor is None:
                totals = self._totals.copy()
                temporality = CUMULATIVE
            else:
                totals, dropped = cursor.take()
                temporality = DELTA
        if totals.start_ns is None:
            return None
        return ScopeMetrics(
            scope=InstrumentationScope("looptrace", version()),
            metrics=self._metrics(totals, totals.start_ns, dropped, temporality, detail=detail),
            schema_url="",
        )

    def _metrics(
        self,
        totals: Totals,
        start: int,
        dropped: int,
        temporality: AggregationTemporality,
        *,
        detail: bool = True,
    ) -> list[Metric]:
        """Return every metric of `totals`: this rank's few series, its detail, the job's."""
        rank_level = [
            *self._counted(totals, start, temporality, detail=detail),
            *rank_metrics(totals, self.attributes, start, temporality),
            *job_metrics(totals, self.attributes, start, temporality),
        ]
        if not detail:  # the spans an exporter dropped still show, once there are any
            dropped_metrics = (
                [] if dropped == 0 else [self._dropped(totals, start, dropped, temporality)]
            )
            return [*dropped_metrics, *rank_level]
        dropped_metric = self._dropped(totals, start, dropped, temporality)
        memory = memory_metrics(totals, self.attributes, start)
        return [*self._detail(totals, start, temporality), dropped_metric, *memory, *rank_level]

    def _detail(
        self, totals: Totals, start: int, temporality: AggregationTemporality
    ) -> list[Metric]:
        """Return the duration histogram and window quantiles of every path."""
        now = totals.time_ns
        series = sorted(totals.series.items())
        duration = Metric(
            name=DURATION_METRIC,
            description=DURATION_DESCRIPTION,
            unit=SECONDS,
            data=self._exponential(series, start, now, temporality)
            if self.histogram == "exponential"
            else Histogram(
                data_points=[
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
                    for path, s in series
                ],
                aggregation_temporality=temporality,
            ),
        )
        window = Metric(
            name=WINDOW_METRIC,
            description=WINDOW_DESCRIPTION,
            unit=SECONDS,
            data=Gauge(
                data_points=[
                    NumberDataPoint(
                        attributes={**self.labels(path), QUANTILE: q},
                        start_time_unix_nano=start,
                        time_unix_nano=now,
                        value=value,
                    )
                    for path, s in series
                    for (q, _), value in zip(QUANTILES, s.quantiles, strict=False)
                ]
            ),
        )
        return [duration, window]

    def _dropped(
        self, totals: Totals, start: int, dropped: int, temporality: AggregationTemporality
    ) -> Metric:
        """Return the counter of spans the exporters could not deliver."""
        return Metric(
            name=DROPPED_METRIC,
            description=DROPPED_DESCRIPTION,
            unit=SPANS,
            data=Sum(
                data_points=[
                    NumberDataPoint(
                        attributes=dict(self.attributes),
                        start_time_unix_nano=start,
                        time_unix_nano=totals.time_ns,
                        value=dropped,
                    )
                ],
                aggregation_temporality=temporality,
                is_monotonic=True,
            ),
        )

    def _counted(
        self, totals: Totals, start: int, temporality: AggregationTemporality, *, detail: bool
    ) -> list[Metric]:
        """Return the units counted and (with detail) their latest rates, where any were."""
        now = totals.time_ns
        found: list[Metric] = []
        if totals.items:
            found.append(
                Metric(
                    name=ITEMS_METRIC,
                    description=ITEMS_DESCRIPTION,
                    unit=ITEMS,
                    data=Sum(
                        data_points=[
                            NumberDataPoint(
                                attributes=item_attributes(path, unit, self.attributes),
                                start_time_unix_nano=start,
                                time_unix_nano=now,
                                value=value,
                            )
                            for (path, unit), value in sorted(totals.items.items())
                        ],
                        aggregation_temporality=temporality,
                        is_monotonic=True,
                    ),
                )
            )
        if totals.rates and detail:
            found.append(
                _gauge(
                    ITEMS_RATE_METRIC,
                    ITEMS_RATE_DESCRIPTION,
                    ITEMS_RATE,
                    [
                        (item_attributes(path, unit, self.attributes), value)
                        for (path, unit), value in sorted(totals.rates.items())
                    ],
                    start=start,
                    now=now,
                )
            )
        return found

    def _exponential(
        self,
        series: list[tuple[str, Series]],
        start: int,
        now: int,
        temporality: AggregationTemporality,
    ) -> ExponentialHistogram:
        """Return the duration histogram as base-2 exponential buckets (see `exponential`)."""
        points = []
        for path, s in series:
            offset, counts = dense(s.exponential)
            points.append(
                ExponentialHistogramDataPoint(
                    attributes=self.labels(path),
                    start_time_unix_nano=start,
                    time_unix_nano=now,
                    count=s.count,
                    sum=s.sum,
                    scale=SCALE,
                    zero_count=0,  # every duration is 1 ns or more
                    positive=Buckets(offset=offset, bucket_counts=counts),
                    negative=Buckets(offset=0, bucket_counts=[]),
                    flags=0,
                    min=s.min,
                    max=s.max,
                    exemplars=[_otlp_exemplar(e) for _, e in sorted(s.exemplars.items())],
                )
            )
        return ExponentialHistogram(data_points=points, aggregation_temporality=temporality)


def _gauge(
    name: str,
    description: str,
    unit: str,
    points: list[tuple[dict[str, str | int], float]],
    *,
    start: int,
    now: int,
) -> Metric:
    """Return a gauge of `points` (attributes, value)."""
    return Metric(
        name=name,
        description=description,
        unit=unit,
        data=Gauge(
            data_points=[
                NumberDataPoint(
                    attributes=attributes,
                    start_time_unix_nano=start,
                    time_unix_nano=now,
                    value=value,
                )
                for attributes, value in points
            ]
        ),
    )


def _otlp_exemplar(exemplar: TraceExemplar) -> Exemplar:
    return Exemplar(
        filtered_attributes={},
        value=exemplar.value,
        time_unix_nano=exemplar.time_ns,
        span_id=exemplar.span_id,
        trace_id=exemplar.trace_id,
    )
