"""Explicit histogram bucket boundaries in seconds, log-spaced from 1 µs to 1,000 s."""

from __future__ import annotations

# Five per decade (the R5 preferred numbers 1, 1.6, 2.5, 4, 6.3): a ratio of ~1.6 between
# neighbours, readable `le` labels, from a kernel launch or a tokenizer call to a checkpoint.
# Prometheus's `histogram_quantile` interpolates inside a bucket; the snapshot's quantiles of
# every window are served beside the buckets (`looptrace_section_window_duration_seconds`).
_MANTISSAS = (1.0, 1.6, 2.5, 4.0, 6.3)
BOUNDARIES_NS: tuple[int, ...] = (
    *(round(m * 10**e) for e in range(3, 12) for m in _MANTISSAS),
    10**12,
)
BOUNDARIES_S: tuple[float, ...] = tuple(b / 1e9 for b in BOUNDARIES_NS)
