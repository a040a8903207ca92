"""Hypothesis strategies for windows of section statistics, as snapshot files hold them."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from looptrace import SectionStats
from looptrace._offline.window_records import Window

_SECONDS = st.floats(min_value=1e-6, max_value=100.0, allow_nan=False)


@st.composite
def section_stats(draw: st.DrawFn, *, nan: bool = True) -> SectionStats:
    """One window's statistics of a path: none ended (count 0), or ordered quantiles."""
    count = draw(st.sampled_from([0, 1, 2, 3, 7, 100]))
    total = draw(st.one_of(_SECONDS, st.just(math.nan)) if nan else _SECONDS)
    buckets = tuple(draw(st.lists(st.integers(0, 5), min_size=2, max_size=3)))
    if count == 0:
        return SectionStats.empty(total=total, self_time=total / 2, errors=0, buckets=buckets)
    low, *middle, high = sorted(draw(st.lists(_SECONDS, min_size=5, max_size=5)))
    p50, p90, p99 = middle
    if nan and draw(st.booleans()):
        p90 = math.nan  # a metrics file without it
    return SectionStats(
        count, total, (low + high) / 2, low, high, (high - low) / 4,
        p50, p90, p99, total / 2, draw(st.integers(0, 2)), buckets,
    )  # fmt: skip


@st.composite
def windows(draw: st.DrawFn, *, ranks: int = 3, most: int = 12, nan: bool = True) -> list[Window]:
    """Windows of up to `ranks` ranks over the paths `a` and `a.b`, steps in order."""
    found = []
    for index in range(draw(st.integers(1, most))):
        paths = draw(st.sets(st.sampled_from(["root.a", "root.a.b"]), min_size=1))
        found.append(
            Window(
                rank=draw(st.integers(0, ranks - 1)),
                step=index,
                host=None,
                stats={path: draw(section_stats(nan=nan)) for path in sorted(paths)},
            )
        )
    return found
