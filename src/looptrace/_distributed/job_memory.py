"""The job's memory, reduced in the cross-rank reduce's own collectives: no new one.

Each rank adds, per figure of `FIGURES` (per rank, not per path), to the collectives of
`looptrace._distributed.collectives`:

1. to the MAX of extremes: its value and its negated value, -inf where it did not measure
   the figure (a figure a rank did not measure counts nowhere, never as 0);
2. to the SUM: its value (0 where not measured) and 1 where it measured it (for the mean);
3. to the MAX of holders: its negated rank where it holds the highest value, and again
   where it holds the lowest, else -world (the lowest such rank on a tie).

`6 x len(FIGURES)` values (192 bytes) per rank and window, whatever the world size.
Float64 holds every byte count below 2^53 (8 PiB) exactly, so ranks compare equal values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from looptrace._stats.memory import WindowMemory
from looptrace._stats.spread import RankSpread

# The figures of `WindowMemory` reduced across ranks, in this order.
FIGURES = ("host_rss", "host_peak_rss", "device_peak_allocated", "device_peak_reserved")
EXTREMES = 2 * len(FIGURES)
SUMS = 2 * len(FIGURES)
HOLDERS = 2 * len(FIGURES)


@dataclass(frozen=True, slots=True)
class Figures:
    """One rank's memory figures in a cross-rank reduce (None where not measured)."""

    values: tuple[float | None, ...]
    rank: int
    world: int

    @classmethod
    def of(cls, memory: WindowMemory | None, rank: int, world: int) -> Figures:
        """Return this rank's figures of `memory` (None: none measured)."""
        values = tuple(_figure(memory, name) for name in FIGURES)
        return cls(values, rank, world)

    def extremes(self) -> list[float]:
        """Return the values this rank adds to the MAX: per figure its value, then negated."""
        highest = [-math.inf if v is None else v for v in self.values]
        lowest = [-math.inf if v is None else -v for v in self.values]
        return highest + lowest

    def sums(self) -> list[float]:
        """Return the values this rank adds to the SUM: per figure its value, then 1 or 0."""
        return [0.0 if v is None else v for v in self.values] + [
            0.0 if v is None else 1.0 for v in self.values
        ]

    def holders(self, extremes: Sequence[float]) -> list[float]:
        """Return the values this rank adds to the MAX of holders, from the reduced extremes."""
        n = len(FIGURES)
        nobody = -float(self.world)
        mine = -float(self.rank)
        highest = [
            mine if v is not None and v == extremes[i] else nobody
            for i, v in enumerate(self.values)
        ]
        lowest = [
            mine if v is not None and -v == extremes[n + i] else nobody
            for i, v in enumerate(self.values)
        ]
        return highest + lowest

    def spreads(
        self, extremes: Sequence[float], sums: Sequence[float], holders: Sequence[float]
    ) -> dict[str, RankSpread]:
        """Return the spread of every figure some rank measured, from the reduced values."""
        n = len(FIGURES)
        found = {}
        for i, name in enumerate(FIGURES):
            count = sums[n + i]
            if count <= 0 or not math.isfinite(extremes[i]):
                continue
            found[name] = RankSpread(
                min=-extremes[n + i],
                max=extremes[i],
                mean=sums[i] / count,
                slowest_rank=-int(holders[i]),
                fastest_rank=-int(holders[n + i]),
            )
        return found


def _figure(memory: WindowMemory | None, name: str) -> float | None:
    value = None if memory is None else getattr(memory, name)
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None
