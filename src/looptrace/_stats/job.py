"""The job's view of one cross-rank window: histograms summed over ranks, and who serves what.

Made by `reset(across_ranks=True)` (see `looptrace._distributed.job_histograms`) and carried by the
`Snapshot` as `snapshot.job`. Plain data, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class JobHistogram:
    """One section path over every rank of the job, in one window.

    `buckets`, `count` and `sum` are the sums of the ranks' own (exact: the same numbers
    each rank's histogram holds, added up); `min` and `max` are the lowest and highest
    duration of any rank. `quantiles` are the highest p50, p90 and p99 of any rank's window
    (the slowest rank's exact quantiles: a quantile of every rank's durations together would
    need them all).
    """

    count: int
    sum: float
    min: float
    max: float
    buckets: tuple[int, ...]
    quantiles: tuple[float, ...]

    def to_dict(self) -> dict[str, object]:
        """Return the histogram as plain data."""
        return {
            "count": self.count,
            "sum": self.sum,
            "min": self.min,
            "max": self.max,
            "buckets": list(self.buckets),
            "quantiles": list(self.quantiles),
        }


@dataclass(frozen=True, slots=True)
class JobView:
    """What a cross-rank window says about the job's metrics, the same on every rank.

    Attributes:
        histograms: per path some rank ran, its `JobHistogram`.
        serves_job: this rank serves and pushes the job's series (`configure(job_rank=...)`).
        detail: this rank serves its full per-section detail until the next cross-rank
            window: it is among the `detail_ranks` slowest ranks of this window, the window's
            straggler or a chronic straggler (always True with `detail_ranks="all"`); None
            when no rank ran a lap in the window (nothing to rank: as before).

    """

    histograms: Mapping[str, JobHistogram] = field(default_factory=lambda: MappingProxyType({}))
    serves_job: bool = False
    detail: bool | None = True
