"""A fixed-memory quantile sketch with bounded relative error (DDSketch's log buckets)."""

from __future__ import annotations

import math
from typing import Final

RELATIVE_ACCURACY: Final = 0.01
_GAMMA: Final = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_INV_LOG_GAMMA: Final = 1 / math.log(_GAMMA)
# Values are integer nanoseconds, so indices run from 0 (1 ns) to 2,184 (2^63 ns, 292 years,
# the range of a signed 64-bit nanosecond clock): memory per sketch is bounded by the range of
# durations, never by how many were added, and a days-long section keeps its 1 %.
MAX_NS: Final = 2**63
_MAX_INDEX: Final = math.ceil(math.log(MAX_NS) * _INV_LOG_GAMMA)
# The last integer of each bucket, computed once: a fold needs one per bucket it fills.
_LAST: Final = [math.floor(_GAMMA**index) for index in range(_MAX_INDEX + 1)]
# The value each bucket reports, 1 % from both of its ends.
_VALUE: Final = [2 * _GAMMA**index / (_GAMMA + 1) for index in range(_MAX_INDEX + 1)]


class QuantileSketch:
    """Counts of durations in buckets `(γ^(i-1), γ^i]`; any quantile within 1 % relative error.

    Each bucket is reported by the value whose relative distance to both of its ends is
    `RELATIVE_ACCURACY`, which bounds the error of every quantile (Masson et al., VLDB 2019).
    """

    __slots__ = ("bins", "count")

    def __init__(self) -> None:
        self.bins: dict[int, int] = {}
        self.count = 0

    def add(self, value_ns: int) -> None:
        """Add one duration in nanoseconds (below 1 ns counts as 1 ns, above `MAX_NS` as it)."""
        index = bucket_of(value_ns)
        bins = self.bins
        bins[index] = bins.get(index, 0) + 1
        self.count += 1

    def add_sorted(self, values_ns: list[int]) -> None:
        """Add many durations sorted ascending: one pass, one bucket computed per bucket filled."""
        bins = self.bins
        n = len(values_ns)
        i = 0
        while i < n:
            index = bucket_of(values_ns[i])
            # The bucket's last integer; float rounding at its edge moves a value by at most
            # one bucket, well within the accuracy, and `i + 1` guarantees progress.
            last = _LAST[index]
            end = i + 1
            while end < n and values_ns[end] <= last:
                end += 1
            bins[index] = bins.get(index, 0) + end - i
            i = end
        self.count += n

    def weighted(self) -> list[tuple[float, int]]:
        """Return `(value_ns, count)` per filled bucket, each bucket by its reported value."""
        return [(_VALUE[index], count) for index, count in sorted(self.bins.items())]

    def quantile(self, q: float) -> float:
        """Return the q-quantile in nanoseconds (NaN when empty).

        The nearest-rank definition: the ceil(q * n)-th smallest value, so the p99 of a few
        values is their largest, never below the mean of two.
        """
        return self.quantiles((q,))[0]

    def quantiles(self, qs: tuple[float, ...]) -> list[float]:
        """Return the `qs`-quantiles (ascending) in nanoseconds: one pass over sorted buckets."""
        if self.count == 0:
            return [math.nan for _ in qs]
        ranks = [nearest_rank(q, self.count) for q in qs]
        found: list[float] = []
        seen = 0
        bins = self.bins
        for index in sorted(bins):
            seen += bins[index]
            while len(found) < len(ranks) and seen > ranks[len(found)]:
                found.append(_VALUE[index])
            if len(found) == len(ranks):
                return found
        raise AssertionError("unreachable: every rank is below count")


def nearest_rank(q: float, n: int) -> int:
    """Return the index of the q-quantile among `n` sorted values: the ceil(q * n)-th."""
    return max(math.ceil(q * n) - 1, 0)


def bucket_of(value_ns: int) -> int:
    """Return the sketch bucket index of a duration in nanoseconds."""
    if value_ns <= 1:
        return 0
    index = math.ceil(math.log(float(value_ns)) * _INV_LOG_GAMMA)  # compiled: no Python calls
    return index if index < _MAX_INDEX else _MAX_INDEX
