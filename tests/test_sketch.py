"""The quantile sketch: bounded relative error, bounded memory."""

from __future__ import annotations

import math
import random

import pytest

from looptrace._stats.sketch import _LAST, MAX_NS, RELATIVE_ACCURACY, QuantileSketch
from looptrace.testing import Capture

HOUR_S = 3600
DAY_S = 24 * HOUR_S


def _exact(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[max(math.ceil(q * len(ordered)) - 1, 0)])  # nearest rank


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_quantiles_within_one_percent_on_log_normal_durations(seed: int) -> None:
    """p50/p90/p99 of 100k log-normal durations are within 1 % of the exact values."""
    rng = random.Random(seed)
    values = [max(1, int(rng.lognormvariate(math.log(5e6), 1.2))) for _ in range(100_000)]
    sketch = QuantileSketch()
    for value in values:
        sketch.add(value)
    for q in (0.5, 0.9, 0.99):
        exact = _exact(values, q)
        assert abs(sketch.quantile(q) - exact) / exact <= RELATIVE_ACCURACY


def test_memory_is_bounded_by_range_not_count() -> None:
    """A million values spanning 1 ns..1000 s occupy at most ~1,400 bins."""
    sketch = QuantileSketch()
    rng = random.Random(0)
    for _ in range(1_000_000 // 10):
        sketch.add(int(10 ** rng.uniform(0, 12)))
    assert len(sketch.bins) <= 1_400
    assert sketch.count == 100_000


def test_empty_sketch_quantile_is_nan() -> None:
    """An empty sketch has no quantiles."""
    assert math.isnan(QuantileSketch().quantile(0.5))


def test_single_value() -> None:
    """One value is returned within the relative accuracy."""
    sketch = QuantileSketch()
    sketch.add(1234567)
    assert sketch.quantile(0.99) == pytest.approx(1234567, rel=RELATIVE_ACCURACY)


def test_nearest_rank_on_few_values() -> None:
    """p50 of [35, 67] ms is 35 ms and p99 is 67 ms (nearest rank), never below the mean."""
    sketch = QuantileSketch()
    sketch.add_sorted([35_000_000, 67_000_000])
    assert sketch.quantile(0.5) == pytest.approx(35_000_000, rel=RELATIVE_ACCURACY)
    assert sketch.quantile(0.99) == pytest.approx(67_000_000, rel=RELATIVE_ACCURACY)


def test_sorted_batches_fill_the_bins_one_add_per_value_fills() -> None:
    """add_sorted() of runs, bucket edges and the top bucket matches add() value by value."""
    edges = [v + d for v in _LAST for d in (-1, 0, 1) if v + d >= 0]
    rng = random.Random(4)
    spread = [int(10 ** rng.uniform(0, 13.5)) for _ in range(20_000)]
    runs = [rng.choice([1_000, 5_000_000, 5_000_001]) for _ in range(3_000)]
    values = sorted(edges + spread + runs)
    one_by_one, batched = QuantileSketch(), QuantileSketch()
    for value in values:
        one_by_one.add(value)
    batched.add_sorted(values)
    assert batched.bins == one_by_one.bins
    assert batched.count == one_by_one.count == len(values)


def _laps(cap: Capture, seconds: list[int]) -> None:
    """Lap `root.long.step` once per duration on the fake clock."""
    long = cap.lt.timer("long")
    for duration in seconds:
        with long.section("step"):
            cap.clock.advance(duration)


@pytest.mark.parametrize(
    ("low_s", "high_s"),
    [(HOUR_S, 10 * HOUR_S), (DAY_S, 30 * DAY_S)],
    ids=["1-10-hours", "1-30-days"],
)
def test_long_sections_keep_one_percent(cap: Capture, low_s: int, high_s: int) -> None:
    """5,000 laps of hours (or days) each, past the exact range: p50/p90/p99 within 1 %."""
    rng = random.Random(low_s)
    seconds = [rng.randint(low_s, high_s) for _ in range(5_000)]
    _laps(cap, seconds)
    stats = cap.lt.reset()["root.long.step"]
    assert stats.count == 5_000
    assert (stats.min, stats.max) == (min(seconds), max(seconds))
    for q, got in ((0.5, stats.p50), (0.9, stats.p90), (0.99, stats.p99)):
        exact = _exact(seconds, q)
        assert abs(got - exact) / exact <= RELATIVE_ACCURACY, (q, got, exact)


def test_every_duration_a_nanosecond_clock_holds_keeps_one_percent() -> None:
    """Quantiles of one duration per power of two from 1 ns to 2^63 ns are each within 1 %."""
    for power in range(64):
        value = min(2**power, MAX_NS - 1)
        sketch = QuantileSketch()
        sketch.add_sorted([value])
        assert sketch.quantile(0.5) == pytest.approx(value, rel=RELATIVE_ACCURACY), power


def test_memory_stays_fixed_from_nanoseconds_to_days() -> None:
    """Values from 1 ns to 30 days fill at most the sketch's bins; more values add no bin."""
    rng = random.Random(5)
    top = 30 * DAY_S * 10**9
    sketch = QuantileSketch()
    sketch.add_sorted(sorted(int(10 ** rng.uniform(0, math.log10(top))) for _ in range(200_000)))
    filled = len(sketch.bins)
    assert filled <= 2_000  # log(30 days / 1 ns) / log(1.0202): ~1,790 buckets in range
    sketch.add_sorted(sorted(rng.randint(1, top) for _ in range(200_000)))
    sketch.add(2**70)  # beyond any clock: counted in the top bin
    assert len(sketch.bins) <= filled + 1
    assert sketch.count == 400_001
