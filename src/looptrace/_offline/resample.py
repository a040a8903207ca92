"""The bootstrap of `looptrace compare`: resampling ranks, or blocks of one rank's windows.

A rank's windows are not independent samples (one process, one GPU, one data shard), so the
unit of resampling is the rank: each rank's values of a statistic are summed first, and a
resample draws as many ranks as there are, with replacement; its mean is the sum of the drawn
ranks' sums over the sum of their counts. A rank that holds more windows weighs in proportion
to them, as in the mean of every window, and its many windows do not narrow the interval.

Where one rank holds the values (a one-process run, a section only rank 0 runs), the units are
the moving blocks of its windows in file order, each `round(n ** (1 / 3))` windows long, and a
resample draws `ceil(n / length)` of them: the moving-block bootstrap, which keeps the
correlation of neighbouring windows.

A resample costs O(units): the units' sums are computed once per statistic, and the drawn
indices once per side and count of units (a fixed seed, so the same files always give the same
interval), then read with `operator.itemgetter` and summed in C.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter

RESAMPLES = 1000
_SEED = 0

Draws = list[Callable[[Sequence[float]], tuple[float, ...]]]


@dataclass(frozen=True)
class Units:
    """One side's values of one statistic, as the units a resample draws."""

    sums: list[float]  # each unit's sum of values
    counts: list[int]  # each unit's count of values
    draws: int  # units drawn by one resample
    ranks: int  # ranks that hold the values (1: the units are blocks of windows)


def units(by_rank: Sequence[list[float]]) -> Units | None:
    """Return the units of each rank's values (NaN dropped), or None for fewer than 2 values."""
    sums, counts, kept = [], [], []
    for own in by_rank:
        total = math.fsum(own)
        if math.isnan(total):  # rare: drop the NaN values
            own = [v for v in own if not math.isnan(v)]  # noqa: PLW2901
            total = math.fsum(own)
        if own:
            sums.append(total)
            counts.append(len(own))
            kept.append(own)
    if sum(counts) < 2:
        return None
    if len(kept) > 1:
        return Units(sums, counts, len(kept), len(kept))
    values = kept[0]
    length = block_length(len(values))
    prefix = [0.0, *itertools.accumulate(values)]
    sums = [prefix[start + length] - prefix[start] for start in range(len(values) - length + 1)]
    return Units(sums, [length] * len(sums), math.ceil(len(values) / length), 1)


def block_length(windows: int) -> int:
    """Return the length of the blocks of one rank's `windows` windows: about their cube root."""
    return max(1, min(windows - 1, round(math.pow(windows, 1 / 3))))


class Resampler:
    """Draws the resamples of each side, once per count of units, from a fixed seed."""

    def __init__(self, resamples: int = RESAMPLES) -> None:
        self.resamples = resamples
        self._draws: dict[tuple[str, int, int], Draws] = {}

    def means(self, side: str, sample: Units) -> list[float]:
        """Return the mean of each resample of `sample`, one side's units of one statistic."""
        getters = self._drawn(side, len(sample.sums), sample.draws)
        sums = sample.sums
        if min(sample.counts) == max(sample.counts):  # every unit holds as many values
            count = sample.counts[0] * sample.draws
            return [sum(get(sums)) / count for get in getters]
        counts = sample.counts
        return [sum(get(sums)) / sum(get(counts)) for get in getters]

    def _drawn(self, side: str, population: int, draws: int) -> Draws:
        key = (side, population, draws)
        if key not in self._draws:
            rng = random.Random(f"{_SEED} {side} {population} {draws}")
            indices = range(population)
            self._draws[key] = [
                _getter(rng.choices(indices, k=draws)) for _ in range(self.resamples)
            ]
        return self._draws[key]


def _getter(indices: list[int]) -> Callable[[Sequence[float]], tuple[float, ...]]:
    """Return a function that reads the values at `indices` of a sequence, as a tuple."""
    if len(indices) == 1:
        (index,) = indices
        return lambda values: (values[index],)
    return itemgetter(*indices)
