"""Which ranks serve their full per-section detail: the slowest of each window, no new collective.

A rank's slowness is the straggler's figure (`looptrace._distributed.job_straggler`): its negated
time in wait sections when some rank ran one, else its lap time outside them. Each rank adds
(`looptrace._distributed.collectives`):

1. to the MAX of extremes: its time in wait sections and its negated lap time outside them,
   so that with the straggler's own values every rank knows the lowest and the highest
   slowness of the window;
2. to the SUM: a one in the bin of its slowness among `BINS` equal bins from the lowest to
   the highest, so that every rank knows how many ranks each bin holds.

The detail ranks are those of the highest bins that together hold at most `detail_ranks`
ranks: the `detail_ranks` slowest, less any whose bin they would share with faster ranks
beyond that number (ranks within 1/`BINS` of the spread of each other are as slow as each
other). The window's straggler and a chronic straggler serve detail as well. Every rank
computes the same bins from the same reduced values and decides for itself: `2 + BINS`
values per rank, whatever the world size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from looptrace._stats.straggler import RankFigures

BINS = 64


@dataclass
class Slowness:
    """One rank's part in choosing the window's detail ranks."""

    figures: RankFigures | None  # None: this rank ran no lap in the window
    limit: int | None  # the number of detail ranks; None: every rank
    bin: int = -1
    chosen: bool = False

    @property
    def _lapped(self) -> bool:
        return self.figures is not None and bool(self.figures.laps)

    def extremes(self) -> list[float]:
        """Return what this rank adds to the MAX: its wait time, its negated outside time."""
        figures = self.figures
        if figures is None or not self._lapped:
            return [-math.inf, -math.inf]
        return [figures.wait_s, -figures.outside_s]

    def sums(self, straggler: Sequence[float], lows: Sequence[float]) -> list[float]:
        """Return what this rank adds to the SUM: a one in the bin of its slowness.

        `straggler` holds the reduced MAX of the straggler's values (negated least wait,
        most outside, whether a wait section ran), `lows` the reduced values of `extremes`.
        """
        counts = [0.0] * BINS
        figures = self.figures
        if figures is None or not self._lapped:
            return counts
        by_wait = straggler[2] > 0
        high = straggler[0] if by_wait else straggler[1]
        low = -lows[0] if by_wait else -lows[1]
        mine = -figures.wait_s if by_wait else figures.outside_s
        if not (math.isfinite(high) and math.isfinite(low)) or high <= low:
            self.bin = BINS - 1
        else:
            self.bin = min(BINS - 1, max(0, int((mine - low) / (high - low) * BINS)))
        counts[self.bin] = 1.0
        return counts

    def counted(self, counts: Sequence[float]) -> None:
        """Take the reduced bin counts: is this rank among the slowest `limit`."""
        if self.bin < 0:
            return
        if self.limit is None:
            self.chosen = True
            return
        taken = 0
        for index in range(BINS - 1, -1, -1):
            taken += int(counts[index])
            if taken > self.limit:
                return
            if index == self.bin:
                self.chosen = True
                return

    def detail(self, rank: int, straggler: int | None, chronic: int | None) -> bool:
        """Return whether this rank serves detail (once some rank ran a lap in the window)."""
        return self.limit is None or self.chosen or rank in (straggler, chronic)
