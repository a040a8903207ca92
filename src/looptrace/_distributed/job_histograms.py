"""The job's histograms, summed in the cross-rank reduce's own collectives: no new one.

Per agreed path each rank adds (`looptrace._distributed.collectives`):

1. to the MAX of extremes: its window's p50 and p90 and its negated min (the p99 and the max
   are among the spread's statistics already), -inf where it did not run the path;
2. to the SUM: its histogram's bucket counts (zeros where it did not run the path); the
   spread's SUM already holds every rank's count and total of the path.

Float64 adds whole numbers exactly up to 2^53, so the job's bucket counts and counts are the
exact sums of the ranks' own. `len(BOUNDARIES_S) + 4` more values per path (50): 400 more
bytes per rank and path, whatever the world size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from looptrace._stats.buckets import BOUNDARIES_S
from looptrace._stats.job import JobHistogram, JobView
from looptrace._stats.snapshot import Snapshot

BUCKETS = len(BOUNDARIES_S) + 1
HIGHEST = ("p50", "p90")  # besides the spread's p99 and max
EXTREMES = len(HIGHEST) + 1  # and the negated min

DetailRanks = int | Literal["all"]


@dataclass(frozen=True, slots=True)
class Scale:
    """Which ranks serve which metrics in a cross-rank window (`configure()` sets it).

    Attributes:
        detail_ranks: how many of the slowest ranks of each window serve their full
            per-section detail; `"all"`: every rank does.
        job_rank: the rank that serves and pushes the job's histograms.

    """

    detail_ranks: DetailRanks = 8
    job_rank: int = 0


def extremes(snapshot: Snapshot, rows: int, row_of: dict[str, int]) -> list[float]:
    """Return this rank's values for the MAX: per row p50, p90 and -min, -inf where absent."""
    values = [-math.inf] * (rows * EXTREMES)
    for path, row in row_of.items():
        stats = snapshot[path]
        start = row * EXTREMES
        for offset, value in enumerate((stats.p50, stats.p90, -stats.min)):
            if math.isfinite(value):
                values[start + offset] = value
    return values


def buckets(snapshot: Snapshot, rows: int, row_of: dict[str, int]) -> list[float]:
    """Return this rank's values for the SUM: per row its bucket counts, zeros where absent."""
    values = [0.0] * (rows * BUCKETS)
    for path, row in row_of.items():
        start = row * BUCKETS
        for index, count in enumerate(snapshot[path].buckets[:BUCKETS]):
            values[start + index] = float(count)
    return values


def histograms(
    names: Sequence[str],
    present: Sequence[int],
    *,
    counts_and_totals: Sequence[tuple[float, float]],
    p99_and_max: Sequence[tuple[float, float]],
    highest: Sequence[float],
    summed: Sequence[float],
) -> dict[str, JobHistogram]:
    """Return the job's histogram of every present row from the reduced values."""
    found = {}
    for row in present:
        (count, total), (p99, top) = counts_and_totals[row], p99_and_max[row]
        p50, p90, negated_min = highest[row * EXTREMES : (row + 1) * EXTREMES]
        found[names[row]] = JobHistogram(
            count=int(count),
            sum=total,
            min=-negated_min if math.isfinite(negated_min) else math.nan,
            max=top,
            buckets=tuple(int(n) for n in summed[row * BUCKETS : (row + 1) * BUCKETS]),
            quantiles=tuple(_or_nan(q) for q in (p50, p90, p99)),
        )
    return found


def view(found: dict[str, JobHistogram], *, serves_job: bool, detail: bool | None) -> JobView:
    """Return the job's view of a window, paths in order."""
    return JobView(
        histograms=MappingProxyType(dict(sorted(found.items()))),
        serves_job=serves_job,
        detail=detail,
    )


def _or_nan(value: float) -> float:
    return value if math.isfinite(value) else math.nan
