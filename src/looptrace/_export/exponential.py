"""Base-2 exponential histogram buckets (OTLP `ExponentialHistogram`), from a window's durations.

With `configure(histogram="exponential")` the duration histogram is pushed as an OTLP
exponential histogram, one series per section for backends with native histograms. Bucket
`i` holds the durations in seconds in `(base**i, base**(i + 1)]`, `base = 2 ** 2 ** -SCALE`.
At scale 7 the bounds of a bucket are 0.54 % apart, so whatever point of a bucket a backend
reports for a quantile (a bound, the middle, an interpolation) is within 1 % of every duration
in it. The counts are built off the training thread, when the cumulative totals fold a window,
from the same durations as the snapshot's quantiles (exact up to 1,023 per path and window,
the sketch's 1 % buckets beyond).
"""

from __future__ import annotations

import math
from typing import Final, Literal

from looptrace._stats.snapshot import Snapshot

HistogramKind = Literal["explicit", "exponential"]
HISTOGRAM_KINDS: Final[tuple[HistogramKind, ...]] = ("explicit", "exponential")

SCALE: Final = 7
_PER_OCTAVE: Final = 2**SCALE


def bucket_index(value_s: float) -> int:
    """Return the index of the bucket `(base**i, base**(i + 1)]` holding `value_s` > 0.

    Float rounding at a bucket's bound may place a value one bucket off, 0.54 % at most.
    """
    return math.ceil(math.log2(value_s) * _PER_OCTAVE) - 1


def lower_bound(index: int) -> float:
    """Return the lower (exclusive) bound of bucket `index` in seconds."""
    return float(2.0 ** (index / _PER_OCTAVE))


def window_counts(snapshot: Snapshot) -> dict[str, dict[int, int]]:
    """Return per path of `snapshot` its durations counted per exponential bucket.

    A path whose durations are not kept (statistics made elsewhere) gets no counts.
    """
    counts: dict[str, dict[int, int]] = {}
    for path in snapshot:
        pairs = snapshot.distribution(path)
        if not pairs:
            continue
        buckets: dict[int, int] = {}
        for value_ns, count in pairs:
            index = bucket_index(value_ns / 1e9)
            buckets[index] = buckets.get(index, 0) + count
        counts[path] = buckets
    return counts


def add_counts(total: dict[int, int], counts: dict[int, int]) -> None:
    """Add one window's bucket counts of a path to its running `total`."""
    for index, count in counts.items():
        total[index] = total.get(index, 0) + count


def dense(counts: dict[int, int]) -> tuple[int, list[int]]:
    """Return `(offset, bucket_counts)`: the counts from the lowest filled bucket up, as OTLP."""
    if not counts:
        return 0, []
    low, high = min(counts), max(counts)
    return low, [counts.get(index, 0) for index in range(low, high + 1)]
