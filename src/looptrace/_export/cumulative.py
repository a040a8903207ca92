"""Running totals of every window since `configure()`: the numbers all metric exporters see.

`CumulativeHistograms` adds each window up (`totals`) off the training thread, so Prometheus
counters only ever grow and a lost OTLP push loses nothing (the next carries the totals), and
renders the totals as OpenTelemetry metrics data (`metric_data`'s shapes). The OTLP push, the
Prometheus endpoint and an application's metric readers all read this one object; a reader
that prefers delta temporality gets a `DeltaCursor` of its own.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Buckets,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Metric,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from looptrace._base.version import version
from looptrace._export.coalesced import Coalesced
from looptrace._export.exemplars import ExemplarProcessor
from looptrace._export.exponential import SCALE, HistogramKind, dense, window_counts
from looptrace._export.job_metrics import job_metrics, memory_metrics, rank_metrics
from looptrace._export.metric_data import (
    Attributes,
    Points,
    counter,
    gauge,
    histogram,
    otlp_exemplars,
)
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
from looptrace._export.system_metrics import system_metrics
from looptrace._export.totals import Series, Totals
from looptrace._export.window_queue import WindowQueue
from looptrace._stats.health import Incidents
from looptrace._stats.snapshot import Snapshot

CUMULATIVE = AggregationTemporality.CUMULATIVE
DELTA = AggregationTemporality.DELTA


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
        # The open steps' and sections' ages, read at each collection (`open_ages`; None: none).
        self.open_gauges: Callable[[], list[Metric]] | None = None
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
            *(self.open_gauges() if self.open_gauges is not None else ()),
        ]
        if not detail:  # the spans an exporter dropped still show, once there are any
            dropped_metrics = (
                [] if dropped == 0 else [self._dropped(totals, start, dropped, temporality)]
            )
            return [*dropped_metrics, *rank_level]
        dropped_metric = self._dropped(totals, start, dropped, temporality)
        memory = [
            *memory_metrics(totals, self.attributes, start),
            *system_metrics(totals, self.attributes, start),
        ]
        return [*self._detail(totals, start, temporality), dropped_metric, *memory, *rank_level]

    def _detail(
        self, totals: Totals, start: int, temporality: AggregationTemporality
    ) -> list[Metric]:
        """Return the duration histogram and window quantiles of every path."""
        now = totals.time_ns
        series = sorted(totals.series.items())
        if self.histogram == "exponential":
            duration = Metric(
                name=DURATION_METRIC,
                description=DURATION_DESCRIPTION,
                unit=SECONDS,
                data=self._exponential(series, start, now, temporality),
            )
        else:
            labelled = [(self.labels(path), s) for path, s in series]
            duration = histogram(
                DURATION_METRIC,
                DURATION_DESCRIPTION,
                SECONDS,
                labelled,
                start=start,
                now=now,
                temporality=temporality,
            )
        quantiles = [
            ({**self.labels(path), QUANTILE: q}, value)
            for path, s in series
            for (q, _), value in zip(QUANTILES, s.quantiles, strict=False)
        ]
        window = gauge(WINDOW_METRIC, WINDOW_DESCRIPTION, SECONDS, quantiles, start=start, now=now)
        return [duration, window]

    def _dropped(
        self, totals: Totals, start: int, dropped: int, temporality: AggregationTemporality
    ) -> Metric:
        """Return the counter of spans the exporters could not deliver."""
        base: Attributes = dict(self.attributes)
        points: Points = [(base, dropped)]
        return counter(
            DROPPED_METRIC,
            DROPPED_DESCRIPTION,
            SPANS,
            points,
            start=start,
            now=totals.time_ns,
            temporality=temporality,
        )

    def _counted(
        self, totals: Totals, start: int, temporality: AggregationTemporality, *, detail: bool
    ) -> list[Metric]:
        """Return the units counted and (with detail) their latest rates, where any were."""
        when = {"start": start, "now": totals.time_ns}
        found: list[Metric] = []
        if totals.items:
            items = [
                (item_attributes(path, unit, self.attributes), value)
                for (path, unit), value in sorted(totals.items.items())
            ]
            found.append(
                counter(
                    ITEMS_METRIC, ITEMS_DESCRIPTION, ITEMS, items, **when, temporality=temporality
                )
            )
        if totals.rates and detail:
            rates = [
                (item_attributes(path, unit, self.attributes), value)
                for (path, unit), value in sorted(totals.rates.items())
            ]
            found.append(
                gauge(ITEMS_RATE_METRIC, ITEMS_RATE_DESCRIPTION, ITEMS_RATE, rates, **when)
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
                    exemplars=otlp_exemplars(s),
                )
            )
        return ExponentialHistogram(data_points=points, aggregation_temporality=temporality)
