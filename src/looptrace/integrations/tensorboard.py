"""TensorBoard: a window's statistics as scalars, and each section's durations as a histogram.

`log_snapshot(writer, snapshot)` writes `timing/<path>/<stat>` with `add_scalar`, and per section
a histogram `timing/<path>` with `add_histogram_raw` from the window's bucket counts (the same
buckets as the `looptrace.section.duration` metric), so TensorBoard's histogram and distribution
views show how each section's durations move over the run. `writer` is a
`torch.utils.tensorboard.SummaryWriter` or a `tensorboardX.SummaryWriter`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from looptrace._stats.buckets import BOUNDARIES_S
from looptrace._stats.snapshot import SectionStats
from looptrace.integrations._common import DEFAULT_STATS, checked_stats, flat_metrics, step_of

__all__ = ["histogram_buckets", "log_snapshot"]


def histogram_buckets(stats: SectionStats) -> tuple[list[float], list[int]]:
    """Return `(bucket_limits, bucket_counts)` of a section, from its first to last filled bucket.

    Each limit is a bucket's upper bound in seconds; the overflow bucket's is the window's max.
    """
    counts = list(stats.buckets)
    limits = [*BOUNDARIES_S, max(stats.max, BOUNDARIES_S[-1])][: len(counts)]
    filled = [index for index, count in enumerate(counts) if count]
    if not filled:
        return [], []
    first, last = filled[0], filled[-1] + 1
    return limits[first:last], counts[first:last]


def log_snapshot(
    writer: Any,
    snapshot: Mapping[str, SectionStats],
    *,
    step: int | None = None,
    prefix: str = "timing",
    stats: Iterable[str] = DEFAULT_STATS,
    histograms: bool = True,
) -> dict[str, float]:
    """Write a window's statistics (and histograms) to TensorBoard and return the scalars.

    Args:
        writer: a `SummaryWriter` (`add_scalar`, `add_histogram_raw`).
        snapshot: what `lt.reset()` returned.
        step: the global step (default `snapshot.step`).
        prefix: the first part of every tag.
        stats: the statistics written per section as scalars.
        histograms: also write a histogram per section that ran in the window.

    Raises:
        ConfigError: no step, or an unknown statistic.

    """
    chosen = checked_stats(stats, "log_snapshot")
    at = step_of(snapshot, step, "log_snapshot")
    values = flat_metrics(snapshot, prefix=prefix, stats_names=chosen, sep="/")
    for tag, value in values.items():
        writer.add_scalar(tag, value, global_step=at)
    if histograms:
        head = f"{prefix}/" if prefix else ""
        for path, entry in snapshot.items():
            limits, counts = histogram_buckets(entry)
            if not counts:
                continue
            writer.add_histogram_raw(
                f"{head}{path.replace('.', '/')}",
                min=entry.min,
                max=entry.max,
                num=entry.count,
                sum=entry.total,
                sum_squares=entry.count * (entry.std**2 + entry.mean**2),
                bucket_limits=limits,
                bucket_counts=counts,
                global_step=at,
            )
    return values
