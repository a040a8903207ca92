"""The Prometheus families of every rank's few series and of the job's series.

See `looptrace._export.job_metrics` for which rank serves what; these render the same
points for a scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from looptrace._export.job_metrics import (
    job_rate_points,
    memory_points,
    rank_figures,
    straggler_points,
)
from looptrace._export.metric_data import Points
from looptrace._export.metrics import (
    CHRONIC_RANK_DESCRIPTION,
    JOB_DURATION_DESCRIPTION,
    JOB_ITEMS_RATE_DESCRIPTION,
    JOB_RANK_RATE_DESCRIPTION,
    JOB_SLOWEST_RANK_DESCRIPTION,
    JOB_WINDOW_DESCRIPTION,
    MEMORY_DESCRIPTION,
    QUANTILE,
    QUANTILES,
    RANK_OUTSIDE_WAIT_DESCRIPTION,
    RANK_STEP_DESCRIPTION,
    RANK_STEPS_DESCRIPTION,
    STRAGGLER_EXCESS_DESCRIPTION,
    STRAGGLER_RANK_DESCRIPTION,
    job_attributes,
)
from looptrace._export.system_metrics import SYSTEM_DESCRIPTION, SYSTEM_FAMILY, system_points
from looptrace._export.totals import Series, Totals
from looptrace._stats.buckets import BOUNDARIES_S

RANK_STEPS_FAMILY = "looptrace_rank_steps"
RANK_STEP_FAMILY = "looptrace_rank_step_window_duration_seconds"
RANK_OUTSIDE_WAIT_FAMILY = "looptrace_rank_outside_wait_seconds"
JOB_DURATION_FAMILY = "looptrace_job_section_duration_seconds"
JOB_WINDOW_FAMILY = "looptrace_job_section_window_duration"
STRAGGLER_RANK_FAMILY = "looptrace_job_straggler_rank"
STRAGGLER_EXCESS_FAMILY = "looptrace_job_straggler_excess_seconds"
CHRONIC_RANK_FAMILY = "looptrace_job_chronic_straggler_rank"
MEMORY_FAMILY = "looptrace_memory_window_bytes"
JOB_ITEMS_RATE_FAMILY = "looptrace_job_items_window_rate"
JOB_RANK_RATE_FAMILY = "looptrace_job_items_window_rank_rate"
JOB_SLOWEST_RANK_FAMILY = "looptrace_job_items_slowest_rank"
_LE = (*(floatToGoString(b) for b in BOUNDARIES_S), "+Inf")  # type: ignore[no-untyped-call]

Label = Callable[[str], str]


def rank_families(totals: Totals, base: dict[str, int], label: Label) -> Iterator[Metric]:
    """Yield this rank's steps, their p50/p99 and its lap time outside wait sections."""
    steps, quantiles, outside = rank_figures(totals, base)
    if not steps:
        return
    for kind, name, description, points in (
        (CounterMetricFamily, RANK_STEPS_FAMILY, RANK_STEPS_DESCRIPTION, steps),
        (GaugeMetricFamily, RANK_STEP_FAMILY, RANK_STEP_DESCRIPTION, quantiles),
        (CounterMetricFamily, RANK_OUTSIDE_WAIT_FAMILY, RANK_OUTSIDE_WAIT_DESCRIPTION, outside),
    ):
        if points:
            yield _family(kind, name, description, points, label)


def memory_families(totals: Totals, base: dict[str, int], label: Label) -> Iterator[Metric]:
    """Yield this rank's memory figures of the latest window that read them (its detail)."""
    points = memory_points(totals, base)
    if points:
        yield _family(GaugeMetricFamily, MEMORY_FAMILY, MEMORY_DESCRIPTION, points, label)


def system_families(totals: Totals, base: dict[str, int], label: Label) -> Iterator[Metric]:
    """Yield this rank's system figures of the latest window that had any (its detail)."""
    points = system_points(totals, base)
    if points:
        yield _family(GaugeMetricFamily, SYSTEM_FAMILY, SYSTEM_DESCRIPTION, points, label)


def job_families(totals: Totals, base: dict[str, int], label: Label) -> Iterator[Metric]:
    """Yield the job's histograms, quantiles, straggler and throughput where this rank serves."""
    if not totals.job:
        return
    series = sorted(totals.job.items())
    names = [label(k) for k in job_attributes("", base)]
    duration = HistogramMetricFamily(
        JOB_DURATION_FAMILY, JOB_DURATION_DESCRIPTION, labels=names, unit="seconds"
    )
    window = Metric(JOB_WINDOW_FAMILY, JOB_WINDOW_DESCRIPTION, "summary", unit="seconds")
    for path, s in series:
        values = [str(v) for v in job_attributes(path, base).values()]
        duration.add_metric(values, _cumulative(s), s.sum)
        for (quantile, _), value in zip(QUANTILES, s.quantiles, strict=False):
            labelled = dict(zip(names, values, strict=True))
            window.add_sample(window.name, {**labelled, QUANTILE: quantile}, value)
    yield duration
    yield window
    rank, excess, chronic = straggler_points(totals, base)
    rate, extremes, slowest = job_rate_points(totals, base)
    for name, description, points in (
        (STRAGGLER_RANK_FAMILY, STRAGGLER_RANK_DESCRIPTION, rank),
        (STRAGGLER_EXCESS_FAMILY, STRAGGLER_EXCESS_DESCRIPTION, excess),
        (CHRONIC_RANK_FAMILY, CHRONIC_RANK_DESCRIPTION, chronic),
        (JOB_ITEMS_RATE_FAMILY, JOB_ITEMS_RATE_DESCRIPTION, rate),
        (JOB_RANK_RATE_FAMILY, JOB_RANK_RATE_DESCRIPTION, extremes),
        (JOB_SLOWEST_RANK_FAMILY, JOB_SLOWEST_RANK_DESCRIPTION, slowest),
    ):
        if points:
            yield _family(GaugeMetricFamily, name, description, points, label)


def _cumulative(series: Series) -> list[tuple[str, float]]:
    running, buckets = 0, []
    for le, count in zip(_LE, series.buckets, strict=True):
        running += count
        buckets.append((le, float(running)))
    return buckets


def _family(
    kind: type[CounterMetricFamily] | type[GaugeMetricFamily],
    name: str,
    description: str,
    points: Points,
    label: Label,
) -> Metric:
    family = kind(name, description, labels=[label(k) for k in points[0][0]])
    for attributes, value in points:
        family.add_metric([str(v) for v in attributes.values()], value)
    return family
