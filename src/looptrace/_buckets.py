"""Explicit histogram bucket boundaries in seconds, log-spaced from 100 µs to 1,000 s."""

from __future__ import annotations

from bisect import bisect_left

# 1, 2.5, 5 per decade: readable `le` labels in Prometheus, and ~2.5x resolution across the
# range a training loop spans, from a fast kernel launch to a checkpoint.
BOUNDARIES_NS: tuple[int, ...] = (
    *(int(m * 10**e) for e in range(5, 12) for m in (1, 2.5, 5)),
    10**12,
)
BOUNDARIES_S: tuple[float, ...] = tuple(b / 1e9 for b in BOUNDARIES_NS)


def bucket_index(value_ns: int) -> int:
    """Return the index of the bucket holding a duration (`value <= boundary`, Prometheus `le`)."""
    return bisect_left(BOUNDARIES_NS, value_ns)
