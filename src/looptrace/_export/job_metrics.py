"""The few series every rank serves, and the job's series one rank serves, as OTLP metrics.

At 16,384 ranks, the full per-section detail of every rank is more series than any one
Prometheus holds. Every rank serves a few series of its own (its steps, their p50 and p99,
its lap time outside wait sections, the units it counted); the ranks that a cross-rank
window names (`JobView.detail`) serve their full detail as well; and one rank serves the
job's histograms, summed over every rank in the reduce, and its throughput (the ranks'
rates summed, the lowest and highest rank's rate, the slowest rank), without a rank attribute.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from opentelemetry.sdk.metrics.export import AggregationTemporality, Metric

from looptrace._distributed.ranks import RANK
from looptrace._export.metric_data import Points, counter, gauge, histogram
from looptrace._export.metrics import (
    BYTES,
    CHRONIC_RANK_DESCRIPTION,
    CHRONIC_RANK_METRIC,
    EXTREME,
    ITEMS_RATE,
    JOB_DURATION_DESCRIPTION,
    JOB_DURATION_METRIC,
    JOB_ITEMS_RATE_DESCRIPTION,
    JOB_ITEMS_RATE_METRIC,
    JOB_RANK_RATE_DESCRIPTION,
    JOB_RANK_RATE_METRIC,
    JOB_SLOWEST_RANK_DESCRIPTION,
    JOB_SLOWEST_RANK_METRIC,
    JOB_WINDOW_DESCRIPTION,
    JOB_WINDOW_METRIC,
    MEMORY,
    MEMORY_DESCRIPTION,
    MEMORY_METRIC,
    QUANTILE,
    QUANTILES,
    RANK_OUTSIDE_WAIT_DESCRIPTION,
    RANK_OUTSIDE_WAIT_METRIC,
    RANK_STEP_DESCRIPTION,
    RANK_STEP_METRIC,
    RANK_STEP_QUANTILES,
    RANK_STEPS_DESCRIPTION,
    RANK_STEPS_METRIC,
    RANKS,
    SECONDS,
    STEPS,
    STRAGGLER_EXCESS_DESCRIPTION,
    STRAGGLER_EXCESS_METRIC,
    STRAGGLER_RANK_DESCRIPTION,
    STRAGGLER_RANK_METRIC,
    job_attributes,
    job_item_attributes,
    section_attributes,
)
from looptrace._stats.straggler import lap_paths

if TYPE_CHECKING:
    from looptrace._export.totals import Totals


def step_paths(totals: Totals) -> list[str]:
    """Return the outermost paths of every window so far: the steps of this rank's timers."""
    return lap_paths(sorted(totals.series))


def rank_figures(totals: Totals, base: dict[str, int]) -> tuple[Points, Points, Points]:
    """Return this rank's steps, their p50/p99 and its lap time outside wait sections."""
    steps: Points = []
    quantiles: Points = []
    for path in step_paths(totals):
        series = totals.series[path]
        attributes = section_attributes(path, base)
        steps.append((attributes, series.count))
        for label, index in RANK_STEP_QUANTILES:
            if index < len(series.quantiles) and not math.isnan(series.quantiles[index]):
                quantiles.append(({**attributes, QUANTILE: label}, series.quantiles[index]))
    outside: Points = [(dict(base), totals.outside_wait_s)] if steps else []
    return steps, quantiles, outside


def rank_metrics(
    totals: Totals, base: dict[str, int], start: int, temporality: AggregationTemporality
) -> list[Metric]:
    """Return the few series this rank serves whether or not it serves its detail."""
    steps, quantiles, outside = rank_figures(totals, base)
    if not steps:
        return []
    when, kind = {"start": start, "now": totals.time_ns}, temporality
    return [
        counter(RANK_STEPS_METRIC, RANK_STEPS_DESCRIPTION, STEPS, steps, **when, temporality=kind),
        gauge(RANK_STEP_METRIC, RANK_STEP_DESCRIPTION, SECONDS, quantiles, **when),
        counter(
            RANK_OUTSIDE_WAIT_METRIC,
            RANK_OUTSIDE_WAIT_DESCRIPTION,
            SECONDS,
            outside,
            **when,
            temporality=kind,
        ),
    ]


def straggler_points(totals: Totals, base: dict[str, int]) -> tuple[Points, Points, Points]:
    """Return the latest cross-rank window's straggler, its excess and a chronic straggler."""
    straggler = totals.straggler
    if straggler is None:
        return [], [], []
    job: dict[str, str | int] = {k: v for k, v in base.items() if k != RANK}
    chronic = straggler.chronic_rank
    return (
        [(job, float(straggler.rank))],
        [(job, straggler.excess_s)],
        [] if chronic is None else [(job, float(chronic))],
    )


def job_rate_points(totals: Totals, base: dict[str, int]) -> tuple[Points, Points, Points]:
    """Return the job's units per second, the lowest and highest rank's, and the slowest rank.

    Per (path, unit) some rank counted in the latest cross-rank window that counted it.
    """
    job: Points = []
    extremes: Points = []
    slowest: Points = []
    for (path, unit), spread in sorted(totals.job_rates.items()):
        attributes = job_item_attributes(path, unit, base)
        job.append((attributes, spread.per_s))
        extremes.append(({**attributes, EXTREME: "min"}, spread.min))
        extremes.append(({**attributes, EXTREME: "max"}, spread.max))
        slowest.append((attributes, float(spread.slowest_rank)))
    return job, extremes, slowest


def memory_points(totals: Totals, base: dict[str, int]) -> Points:
    """Return this rank's memory figures of the latest window that read them, in bytes."""
    return [({**base, MEMORY: name}, value) for name, value in sorted(totals.memory.items())]


def memory_metrics(totals: Totals, base: dict[str, int], start: int) -> list[Metric]:
    """Return the memory gauge (part of a rank's detail), where a window read memory."""
    points = memory_points(totals, base)
    if not points:
        return []
    return [
        gauge(MEMORY_METRIC, MEMORY_DESCRIPTION, BYTES, points, start=start, now=totals.time_ns)
    ]


def job_metrics(
    totals: Totals, base: dict[str, int], start: int, temporality: AggregationTemporality
) -> list[Metric]:
    """Return the job's series: on the rank that serves them, once a window was reduced."""
    if not totals.job:
        return []
    now = totals.time_ns
    series = sorted(totals.job.items())
    duration = histogram(
        JOB_DURATION_METRIC,
        JOB_DURATION_DESCRIPTION,
        SECONDS,
        [(job_attributes(path, base), s) for path, s in series],
        start=start,
        now=now,
        temporality=temporality,
    )
    quantiles: Points = [
        ({**job_attributes(path, base), QUANTILE: q}, value)
        for path, s in series
        for (q, _), value in zip(QUANTILES, s.quantiles, strict=False)
        if not math.isnan(value)
    ]
    found = [
        duration,
        gauge(JOB_WINDOW_METRIC, JOB_WINDOW_DESCRIPTION, SECONDS, quantiles, start=start, now=now),
    ]
    rank, excess, chronic = straggler_points(totals, base)
    rate, extremes, slowest = job_rate_points(totals, base)
    for name, description, unit, points in (
        (STRAGGLER_RANK_METRIC, STRAGGLER_RANK_DESCRIPTION, RANKS, rank),
        (STRAGGLER_EXCESS_METRIC, STRAGGLER_EXCESS_DESCRIPTION, SECONDS, excess),
        (CHRONIC_RANK_METRIC, CHRONIC_RANK_DESCRIPTION, RANKS, chronic),
        (JOB_ITEMS_RATE_METRIC, JOB_ITEMS_RATE_DESCRIPTION, ITEMS_RATE, rate),
        (JOB_RANK_RATE_METRIC, JOB_RANK_RATE_DESCRIPTION, ITEMS_RATE, extremes),
        (JOB_SLOWEST_RANK_METRIC, JOB_SLOWEST_RANK_DESCRIPTION, RANKS, slowest),
    ):
        if points:
            found.append(gauge(name, description, unit, points, start=start, now=now))
    return found
