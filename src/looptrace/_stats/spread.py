"""How one window's statistics spread over the ranks of a job: min / max / mean, slowest rank.

Made by `lt.reset(across_ranks=True)` (see `looptrace._distributed.across_ranks`) and carried by the
`Snapshot` as `snapshot.across_ranks` (sections), `snapshot.memory_across_ranks` (memory)
and `snapshot.rates_across_ranks` (throughput). Plain data, no torch: snapshots with
cross-rank data can be built, compared and flattened anywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The statistics of `SectionStats` reduced across ranks, in this order.
SPREAD_STATS = ("count", "total", "mean", "p99", "max", "self_time")


@dataclass(frozen=True, slots=True)
class RankSpread:
    """One statistic of one section path over the ranks that ran the section.

    Ranks that did not run the section in the window are left out, not counted as zero; a
    statistic no rank has a value for is NaN with `slowest_rank` None. `slowest_rank` answers
    "which rank has the most of this path", which for a section where ranks wait for each
    other is the rank that waits; the rank the others wait for is `Snapshot.straggler`.

    Attributes:
        min: the lowest value of any rank.
        max: the highest value of any rank.
        mean: the mean over the ranks that ran the section.
        slowest_rank: the rank holding `max` (the lowest such rank on a tie), in
            `torch.distributed`'s default group (`RANK` under torchrun).
        fastest_rank: the rank holding `min` (the lowest such rank on a tie).

    """

    min: float
    max: float
    mean: float
    slowest_rank: int | None
    fastest_rank: int | None = None

    def to_dict(self) -> dict[str, float | int | None]:
        """Return the spread as a plain dict."""
        return {
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "slowest_rank": self.slowest_rank,
            "fastest_rank": self.fastest_rank,
        }

    def metrics(self, name: str) -> dict[str, float]:
        """Return `{name}.min_rank`, `.max_rank`, `.mean_rank`, `.slowest_rank`, `.fastest_rank`.

        NaN values and absent ranks are left out.
        """
        values = (("min_rank", self.min), ("max_rank", self.max), ("mean_rank", self.mean))
        flat = {f"{name}.{suffix}": value for suffix, value in values if not math.isnan(value)}
        if self.slowest_rank is not None:
            flat[f"{name}.slowest_rank"] = float(self.slowest_rank)
        if self.fastest_rank is not None:
            flat[f"{name}.fastest_rank"] = float(self.fastest_rank)
        return flat


@dataclass(frozen=True, slots=True)
class SectionSpread:
    """One section path across the ranks of a job, over one window.

    Attributes:
        ranks: how many ranks ran the section in the window.
        absent: the ranks that did not run it (they count in no statistic).
        count, total, mean, p99, max, self_time: the spread of that `SectionStats` field.

    """

    ranks: int
    absent: tuple[int, ...]
    count: RankSpread
    total: RankSpread
    mean: RankSpread
    p99: RankSpread
    max: RankSpread
    self_time: RankSpread

    def to_dict(self) -> dict[str, object]:
        """Return `{"ranks": n, "absent": [...], stat: {min, max, mean, slowest/fastest_rank}}`."""
        data: dict[str, object] = {"ranks": self.ranks, "absent": list(self.absent)}
        for name in SPREAD_STATS:
            spread: RankSpread = getattr(self, name)
            data[name] = spread.to_dict()
        return data

    def metrics(self, name: str) -> dict[str, float]:
        """Return the flat metrics of this path, `name` being `{prefix}.{path}`."""
        flat = {f"{name}.ranks": float(self.ranks)}
        for stat in SPREAD_STATS:
            spread: RankSpread = getattr(self, stat)
            flat.update(spread.metrics(f"{name}.{stat}"))
        return flat


@dataclass(frozen=True, slots=True)
class RateSpread:
    """One unit a timer counted (`Timer.count`), over the ranks that counted it in a window.

    A rank that did not count the unit in the window counts nowhere, not as zero. Rates are
    each rank's `Rate.per_s` (units per second of its window's wall time); the job's rate is
    their sum.

    Attributes:
        ranks: how many ranks counted the unit.
        total: the units the job counted: the sum of those ranks' totals.
        per_s: the job's units per second: the sum of those ranks' rates.
        min: the lowest rate of any of those ranks.
        max: the highest rate of any of those ranks.
        mean: the mean rate over those ranks.
        slowest_rank: the rank holding `min`, the one that counted slowest (the lowest such
            rank on a tie).
        fastest_rank: the rank holding `max` (the lowest such rank on a tie).

    """

    ranks: int
    total: float
    per_s: float
    min: float
    max: float
    mean: float
    slowest_rank: int
    fastest_rank: int

    def to_dict(self) -> dict[str, float | int]:
        """Return the spread as a plain dict."""
        return {
            "ranks": self.ranks,
            "total": self.total,
            "per_s": self.per_s,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "slowest_rank": self.slowest_rank,
            "fastest_rank": self.fastest_rank,
        }

    def metrics(self, total: str, rate: str, sep: str = ".") -> dict[str, float]:
        """Return the flat metrics, `total` and `rate` naming the unit's total and rate.

        `{total}.job` (the job's units), `{total}.job_ranks` (the ranks that counted them),
        `{rate}.job` (the job's units per second) and `{rate}.min_rank`, `.max_rank`,
        `.mean_rank`, `.slowest_rank`, `.fastest_rank`, joined by `sep`; NaN values are left
        out.
        """
        values = {
            f"{total}{sep}job": self.total,
            f"{total}{sep}job_ranks": float(self.ranks),
            f"{rate}{sep}job": self.per_s,
            f"{rate}{sep}min_rank": self.min,
            f"{rate}{sep}max_rank": self.max,
            f"{rate}{sep}mean_rank": self.mean,
            f"{rate}{sep}slowest_rank": float(self.slowest_rank),
            f"{rate}{sep}fastest_rank": float(self.fastest_rank),
        }
        return {name: value for name, value in values.items() if not math.isnan(value)}
