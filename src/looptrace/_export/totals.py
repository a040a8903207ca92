"""The running totals of windows that the metric outputs render: a `Series` per path, `Totals`.

Snapshots are windows (each `reset()` starts from zero); exporters want cumulative series, so
every window is added here: per path its histogram, its latest window's p50/p90/p99 (exact up
to 1,023 intervals, within 1 % beyond) and per bucket the latest traced span that fell in it
(an exemplar); beside them the units counted, this rank's figures and the job's. What adds the
windows up and renders them as metrics comes next: `cumulative`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from looptrace._export.exemplars import TraceExemplar
from looptrace._export.exponential import add_counts
from looptrace._export.metrics import QUANTILES
from looptrace._stats.buckets import BOUNDARIES_S
from looptrace._stats.job import JobHistogram
from looptrace._stats.snapshot import SectionStats, Snapshot
from looptrace._stats.spread import RateSpread
from looptrace._stats.straggler import RankFigures, Straggler


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
    system: dict[str, float] = field(default_factory=dict)  # the latest window's, figure.stat

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
            dict(self.system),
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
        if snapshot.system is not None:
            self.system = snapshot.system.metrics()
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
