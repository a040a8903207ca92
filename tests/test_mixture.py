"""Merged quantiles in one sweep: what 100 halvings of the range found, to float precision."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from looptrace._offline.mixture import mixture_quantile
from looptrace._stats.snapshot import SectionStats

from .helpers.examples import examples
from .helpers.mixture_reference import bisected_quantile

_POINT = st.one_of(st.just(math.nan), st.sampled_from([0.0, 1.0, 2.0]), st.floats(0, 10))


@st.composite
def windows(draw: st.DrawFn) -> SectionStats:
    """Return a window's statistics: sorted points, some unknown (NaN), ties allowed."""
    known = sorted(draw(st.lists(st.floats(0, 10), min_size=5, max_size=5)))
    points = [math.nan if draw(st.booleans()) and draw(st.booleans()) else x for x in known]
    low, p50, p90, p99, high = points
    nan = math.nan
    return SectionStats(
        count=draw(st.integers(1, 1000)), total=nan, mean=nan, min=low, max=high, std=nan,
        p50=p50, p90=p90, p99=p99, self_time=nan, errors=0, buckets=(),
    )  # fmt: skip


@settings(max_examples=examples(300), deadline=None, derandomize=True)
@given(st.lists(windows(), min_size=1, max_size=8), st.sampled_from([0.5, 0.9, 0.99]))
def test_the_sweep_finds_what_bisection_found(parts: list[SectionStats], q: float) -> None:
    """Any windows, ties and unknown points included: the quantile bisection converged to."""
    swept, bisected = mixture_quantile(parts, q), bisected_quantile(parts, q)
    if math.isnan(bisected):
        assert math.isnan(swept)
    else:
        assert math.isclose(swept, bisected, rel_tol=1e-9, abs_tol=1e-9), (swept, bisected)


def test_one_window_gives_its_own_quantiles() -> None:
    """A single window: its p50, p90 and p99 back."""
    nan = math.nan
    stats = SectionStats(4, nan, nan, 1.0, 9.0, nan, 2.0, 5.0, 8.0, nan, 0, ())
    assert [mixture_quantile([stats], q) for q in (0.5, 0.9, 0.99)] == [2.0, 5.0, 8.0]
