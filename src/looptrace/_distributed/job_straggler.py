"""The window's straggler, named in the cross-rank reduce's own collectives: no new one.

Each rank adds a few values (not per path) to the reduce's collectives
(`looptrace._distributed.collectives`):

1. to the MAX of extremes: its negated time in wait sections, its lap time outside them, and
   whether it ran a wait section (so every rank knows the best of each, and which rule holds);
2. to the SUM: its lap time outside wait sections and whether it ran a lap (the typical rank);
3. to the MAX of rank holders: its negated rank when it is the straggler, its lap time
   outside wait sections then, its count of straggler windows packed with its rank, and per
   path its total when it is the straggler (one float per path: every rank learns the
   straggler's sections and their excess over the typical rank).

Every rank computes the same `Straggler` from the same reduced values. The chronic count is
each rank's own (`StragglerCount`): it counts the windows whose excess reached the
`straggler_warning` threshold; it is committed only once the reduce succeeded.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from looptrace._stats.roles import Roles
from looptrace._stats.snapshot import Snapshot
from looptrace._stats.straggler import (
    RankFigures,
    Straggler,
    StragglerCount,
    StragglerStreaks,
    cause_of,
    lap_paths,
    window_steps,
)

COUNTS = StragglerCount()
STREAKS = StragglerStreaks()


@dataclass
class Mine:
    """One rank's part in naming the window's straggler, through the reduce's collectives."""

    snapshot: Snapshot
    figures: RankFigures
    rank: int
    world: int
    straggler: bool = False
    count: int = 0
    significant: bool = False
    by_wait: bool = False
    _outside_sum: float = 0.0
    _lapped_ranks: float = 0.0

    @classmethod
    def of(cls, snapshot: Snapshot, rank: int, world: int) -> Mine:
        """Return this rank's figures of `snapshot` under its roles."""
        return cls(snapshot, RankFigures.of(snapshot, snapshot.roles), rank, world)

    @property
    def lapped_ranks(self) -> int:
        """How many ranks ran a lap in the window (known once `reduced`)."""
        return int(self._lapped_ranks)

    @property
    def _lapped(self) -> bool:
        return bool(self.figures.laps)

    def extremes(self) -> list[float]:
        """Return the values this rank adds to the MAX of extremes."""
        if not self._lapped:
            return [-math.inf, -math.inf, 0.0]
        figures = self.figures
        return [-figures.wait_s, figures.outside_s, float(figures.waits)]

    def sums(self) -> list[float]:
        """Return the values this rank adds to the SUM."""
        return [self.figures.outside_s, 1.0] if self._lapped else [0.0, 0.0]

    def reduced(self, extremes: Sequence[float], sums: Sequence[float]) -> None:
        """Take the reduced extremes and sums: is this rank the straggler, and by how much."""
        least_wait, most_outside, waits = extremes
        self.by_wait = waits > 0
        self._outside_sum, self._lapped_ranks = sums
        if not self._lapped or self._lapped_ranks < 2:
            return
        figures = self.figures
        mine, best = (
            (-figures.wait_s, least_wait) if self.by_wait else (figures.outside_s, most_outside)
        )
        self.straggler = mine == best
        typical = (self._outside_sum - figures.outside_s) / (self._lapped_ranks - 1)
        limits = self.snapshot.limits
        excess = figures.outside_s - typical
        self.significant = (
            self.straggler
            and typical > 0
            and excess / typical >= limits["straggler_warning"]
            and excess / window_steps(self.snapshot) >= limits["straggler_min_excess_s"]
        )

    def holders(self) -> list[float]:
        """Return the values this rank adds to the MAX of holders."""
        limits = self.snapshot.limits
        self.count = COUNTS.preview(
            self.snapshot.subtree, self.significant, int(limits["chronic_windows"])
        )
        packed = float(self.count * self.world + (self.world - 1 - self.rank))
        if not self.straggler:
            return [-float(self.world), -math.inf, packed]
        return [-float(self.rank), self.figures.outside_s, packed]

    def found(
        self,
        names: Sequence[str],
        straggler_totals: Sequence[float],
        path_sums: Sequence[float],
        holders: Sequence[float],
    ) -> Found:
        """Return what the reduce found, to be committed once it succeeded.

        `path_sums` holds the sum of each path's total over the ranks, NaN where no rank ran it.
        """
        negated_rank, outside_s, packed = holders
        limits = self.snapshot.limits
        chronic_count, chronic_rank = divmod(int(packed), self.world)
        chronic = (
            self.world - 1 - chronic_rank if chronic_count >= limits["chronic_count"] else None
        )
        straggler = None
        rank = -int(negated_rank)
        if rank < self.world and self._lapped_ranks >= 2:
            straggler = _straggler_of(
                self.snapshot.roles,
                names,
                straggler_totals,
                path_sums,
                rank=rank,
                by="wait" if self.by_wait else "outside_wait",
                outside_s=outside_s,
                outside_sum=self._outside_sum,
                lapped=int(self._lapped_ranks),
                share=limits["straggler_cause"],
            )
            straggler = _with_chronic(straggler, chronic, chronic_count)
        return Found(self, straggler)


def _straggler_of(
    roles: Roles,
    names: Sequence[str],
    straggler_totals: Sequence[float],
    path_sums: Sequence[float],
    *,
    rank: int,
    by: str,
    outside_s: float,
    outside_sum: float,
    lapped: int,
    share: float,
) -> Straggler:
    """Return the straggler with its excess per section over the typical (other) rank."""
    typical_s = (outside_sum - outside_s) / (lapped - 1)
    present = [path for row, path in enumerate(names) if not math.isnan(path_sums[row])]
    laps = lap_paths(present)
    waits = [p for p in present if roles.of(p) == "wait"]
    excess = {}
    for row, path in enumerate(names):
        if math.isnan(path_sums[row]):  # no rank ran it in this window
            continue
        inside = any(path.startswith(f"{lap}.") for lap in laps)
        waiting = any(path == w or path.startswith(f"{w}.") for w in waits)
        if not inside or waiting:
            continue
        own = straggler_totals[row] if math.isfinite(straggler_totals[row]) else 0.0
        excess[path] = own - (path_sums[row] - own) / (lapped - 1)
    excess_s = outside_s - typical_s
    cause, spread = cause_of(excess, excess_s, share, laps)
    return Straggler(
        rank=rank,
        by=by,
        excess_s=excess_s,
        typical_s=typical_s,
        cause=cause,
        spread_over=spread,
        excess_by_path=MappingProxyType(excess),
    )


def _with_chronic(straggler: Straggler, chronic: int | None, count: int) -> Straggler:
    if chronic is None:
        return straggler
    return Straggler(
        rank=straggler.rank,
        by=straggler.by,
        excess_s=straggler.excess_s,
        typical_s=straggler.typical_s,
        cause=straggler.cause,
        spread_over=straggler.spread_over,
        excess_by_path=straggler.excess_by_path,
        chronic_rank=chronic,
        chronic_count=count,
    )


@dataclass
class Found:
    """What one reduce found: the straggler, and this rank's count to commit on success."""

    mine: Mine
    straggler: Straggler | None

    def commit(self) -> Straggler | None:
        """Count this window in this rank's straggler count; return the straggler, its streak."""
        mine = self.mine
        snapshot = mine.snapshot
        windows = int(snapshot.limits["chronic_windows"])
        COUNTS.count_with(snapshot.subtree, mine.significant, windows)
        straggler = self.straggler
        effective = straggler is not None and straggler.effective(
            window_steps(snapshot), snapshot.limits
        )
        rank = straggler.rank if straggler is not None and effective else None
        streak = STREAKS.count(snapshot.subtree, rank)
        if straggler is None or not streak:
            return straggler
        return dataclasses.replace(straggler, streak=streak)
