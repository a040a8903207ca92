"""Quantiles of several windows merged: each window a piecewise-linear distribution.

A window's distribution runs through its (min, 0), (p50, 0.5), (p90, 0.9), (p99, 0.99) and
(max, 1) (the points it knows), linear in between; the windows merged weigh by their counts.
The quantile q is the least x at which the weighted distribution reaches q, found by a binary search
over the windows' points (n log n for n windows) rather than by halving the range 100 times.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence

from looptrace._stats.snapshot import SectionStats

_LEVELS = (0.0, 0.5, 0.9, 0.99, 1.0)


def curve(stats: SectionStats) -> list[tuple[float, float]]:
    """Return the known (x, level) points of a window's distribution, x never decreasing."""
    points = zip((stats.min, stats.p50, stats.p90, stats.p99, stats.max), _LEVELS, strict=True)
    known: list[tuple[float, float]] = []
    for x, level in points:
        if not math.isnan(x):  # sketch quantiles may be a hair outside [min, max]
            known.append((max(x, known[-1][0]) if known else x, level))
    return known


def mixture_quantile(parts: Sequence[SectionStats], q: float) -> float:
    """Return the least x at which the windows' distributions, weighed by counts, reach q."""
    return mixture_quantiles(parts, (q,))[0]


def mixture_quantiles(parts: Sequence[SectionStats], levels: Sequence[float]) -> list[float]:
    """Return `mixture_quantile` at each of `levels`, the windows' points read once.

    The merged distribution is linear between the windows' points: one sweep guesses the two
    points each level is reached between, exact sums check the guess (a binary search over
    the points where rounding put it off), and the line between them gives the quantile.
    """
    curves = [(part.count, points) for part in parts if (points := curve(part))]
    if not curves:
        return [math.nan] * len(levels)
    weight = sum(count for count, _ in curves)
    xs = sorted({x for _, points in curves for x, _ in points})
    guesses = _swept(curves, xs, [q * weight for q in levels])
    return [
        _quantile(curves, weight, xs, q, guess) for q, guess in zip(levels, guesses, strict=True)
    ]


def _quantile(
    curves: list[tuple[int, list[tuple[float, float]]]],
    weight: int,
    xs: list[float],
    q: float,
    guess: int,
) -> float:
    def share(x: float) -> float:
        return sum(count * _cdf(points, x) for count, points in curves) / weight

    def reached(i: int) -> bool:
        return share(xs[i]) >= q

    after = next(
        (
            i
            for i in (guess, guess + 1)
            if i < len(xs) and reached(i) and not (i and reached(i - 1))
        ),
        None,
    )
    if after is None:
        after = bisect.bisect_left(range(len(xs)), True, key=reached)
    if after == 0:
        return xs[0]
    if after == len(xs):
        return xs[-1]  # reached just past the largest point: each window's max
    low, high = xs[after - 1], xs[after]
    one, two = low + (high - low) / 3, low + 2 * (high - low) / 3
    if not low < one < two < high:  # too close to tell points between them apart
        return high
    at_one, at_two = share(one), share(two)
    if at_two == at_one:
        return high if at_one < q else low
    x = one + (q - at_one) * (two - one) / (at_two - at_one)  # the merged line between
    return min(max(x, low), high)


def _swept(
    curves: list[tuple[int, list[tuple[float, float]]]], xs: list[float], targets: list[float]
) -> list[int]:
    """Guess, per target, the first point where the merged counts reach it, in one sweep.

    Jumps and slopes are added as the sweep passes each window's points; float rounding can
    put a guess one point off, so the caller checks it with exact sums.
    """
    jumps: dict[float, float] = {}
    slopes: dict[float, float] = {}
    for count, points in curves:
        x0, y0 = points[0]
        jumps[x0] = jumps.get(x0, 0.0) + count * y0
        for x1, y1 in points[1:]:
            if x1 > x0:
                slope = count * (y1 - y0) / (x1 - x0)
                slopes[x0] = slopes.get(x0, 0.0) + slope
                slopes[x1] = slopes.get(x1, 0.0) - slope
            else:
                jumps[x0] = jumps.get(x0, 0.0) + count * (y1 - y0)
            x0, y0 = x1, y1
        jumps[x0] = jumps.get(x0, 0.0) + count * (1.0 - y0)
    guesses = [len(xs) - 1] * len(targets)
    left = sorted(range(len(targets)), key=targets.__getitem__)
    value = slope = 0.0
    for index, x in enumerate(xs):
        if index:
            value += slope * (x - xs[index - 1])
        while left and value >= targets[left[0]]:
            guesses[left.pop(0)] = max(index - 1, 0)
        value += jumps.get(x, 0.0)
        slope += slopes.get(x, 0.0)
        while left and value >= targets[left[0]]:
            guesses[left.pop(0)] = index
        if not left:
            break
    return guesses


def _cdf(points: Sequence[tuple[float, float]], x: float) -> float:
    """Return a window's distribution at x: 0 before its first point, 1 past its last."""
    if x < points[0][0]:
        return 0.0
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            return y1 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return 1.0
