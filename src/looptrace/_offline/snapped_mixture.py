"""A bounded merge of many windows' distributions: their points snapped to a fixed value grid.

`mixture.py` merges windows' piecewise-linear distributions (each through its min, p50, p90,
p99 and max, weighed by its count) and keeps every window. Past a bound of windows the
summary folds them here instead: each window's points are moved to the nearest value of a
fixed logarithmic grid (1,024 values per doubling), and the merged distribution is kept as
its jumps and changes of slope at the grid values, window by window added in. Memory is one
entry per grid value between the fastest and the slowest interval, however many windows.

Accuracy: a snapped point is within a factor 2**(1/2048) (0.034 %) of its value, and moving
a window's points by at most that factor moves each of its quantiles by at most that factor
(its quantile at a level is the same mix of the same two points). So each quantile of the
merged distribution is within 0.034 % of the unsnapped merge's, up to float rounding in the
sums (a level off by about 10^-9: where the distribution is flat at a level, the least value
that reaches it may sit at either side of the flat part).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from looptrace._offline.mixture import curve
from looptrace._stats.snapshot import SectionStats

STEPS_PER_DOUBLING = 1024
TOLERANCE = 2 ** (1 / (2 * STEPS_PER_DOUBLING))  # a snapped value is within this factor
_GET = dict.get
_REACHED = 1e-9  # a level counts as reached this close, relative to the weight


def snap(x: float) -> float:
    """Return the grid value nearest `x` (0 stays 0); never decreasing in `x`."""
    if x <= 0.0:
        return 0.0
    return math.pow(2.0, round(math.log2(x) * STEPS_PER_DOUBLING) / STEPS_PER_DOUBLING)


class SnappedMixture:
    """The merged distribution of windows, as jumps and slope changes at grid values."""

    __slots__ = ("_jumps", "_slopes", "high", "low", "weight")

    def __init__(self) -> None:
        """Hold nothing yet (weight 0)."""
        self._jumps: dict[float, float] = {}
        self._slopes: dict[float, float] = {}
        self.weight = 0
        self.low = math.inf  # the smallest and largest point added, unsnapped
        self.high = -math.inf

    def __len__(self) -> int:
        """Return the number of grid values held (what bounds the memory)."""
        return len(self._jumps.keys() | self._slopes.keys())

    def add(self, stats: SectionStats) -> None:
        """Add one window's distribution (`mixture.curve`), weighed by its count."""
        points = curve(stats)
        if not points:
            return
        count = stats.count
        self.weight += count
        low, high = points[0][0], points[-1][0]
        self.low = min(self.low, low)
        self.high = max(self.high, high)
        jumps, slopes, get = self._jumps, self._slopes, _GET
        log2, power, steps = math.log2, math.pow, STEPS_PER_DOUBLING
        x0 = 0.0 if low <= 0.0 else power(2.0, round(log2(low) * steps) / steps)
        y0 = points[0][1]
        if y0:
            jumps[x0] = get(jumps, x0, 0.0) + count * y0
        for x, y1 in points[1:]:
            x1 = 0.0 if x <= 0.0 else power(2.0, round(log2(x) * steps) / steps)  # `snap`
            if x1 > x0:
                slope = count * (y1 - y0) / (x1 - x0)
                slopes[x0] = get(slopes, x0, 0.0) + slope
                slopes[x1] = get(slopes, x1, 0.0) - slope
            else:
                jumps[x0] = get(jumps, x0, 0.0) + count * (y1 - y0)
            x0, y0 = x1, y1
        if y0 < 1.0:
            jumps[x0] = get(jumps, x0, 0.0) + count * (1.0 - y0)

    def merge(self, other: SnappedMixture) -> None:
        """Add every window of `other`."""
        for mine, theirs in ((self._jumps, other._jumps), (self._slopes, other._slopes)):
            for x, value in theirs.items():
                mine[x] = mine.get(x, 0.0) + value
        self.weight += other.weight
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)

    def quantiles(self, levels: Sequence[float]) -> list[float]:
        """Return the least value at which the merged distribution reaches each level."""
        if not self.weight:
            return [math.nan] * len(levels)
        slack = _REACHED * self.weight
        targets = sorted((q * self.weight - slack, i) for i, q in enumerate(levels))
        found = [self.high] * len(levels)  # reached only past the last point: rounding
        xs = sorted(self._jumps.keys() | self._slopes.keys())
        value = slope = 0.0
        previous = xs[0]
        left = 0
        for x in xs:
            before = value + slope * (x - previous)
            while left < len(targets) and before >= targets[left][0]:  # on the line before x
                target, index = targets[left]
                at = previous + (target - value) / slope if slope > 0 else previous
                found[index] = min(max(at, previous), x)
                left += 1
            value = before + self._jumps.get(x, 0.0)
            while left < len(targets) and value >= targets[left][0]:
                found[targets[left][1]] = x
                left += 1
            if left == len(targets):
                break
            slope += self._slopes.get(x, 0.0)
            previous = x
        return [min(max(x, self.low), self.high) for x in found]
