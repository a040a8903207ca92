"""The bisection the summary once estimated merged quantiles with: the reference of `mixture`."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from looptrace._offline.mixture import curve
from looptrace._stats.snapshot import SectionStats


def bisected_quantile(parts: Sequence[SectionStats], q: float) -> float:
    """Estimate a quantile of the union of windows by 100 halvings of the range."""
    curves = [(p.count, curve(p)) for p in parts]
    curves = [(count, c) for count, c in curves if c]
    if not curves:
        return math.nan
    weight = sum(count for count, _ in curves)
    low = min(c[0][0] for _, c in curves)
    high = max(c[-1][0] for _, c in curves)
    for _ in range(100):
        middle = (low + high) / 2
        share = sum(count * _cdf(c, middle) for count, c in curves) / weight
        if share < q:
            low = middle
        else:
            high = middle
    return high


def _cdf(curve: Sequence[tuple[float, float]], x: float) -> float:
    if x < curve[0][0]:
        return 0.0
    for (x0, y0), (x1, y1) in itertools.pairwise(curve):
        if x <= x1:
            return y1 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return 1.0
