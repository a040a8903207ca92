"""Per-section statistics of one reset window, and the read-only snapshot that holds them."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass

from looptrace._buckets import BOUNDARIES_S

# The statistics `as_metrics()` flattens, in this order.
METRIC_STATS = ("count", "total", "mean", "min", "max", "std", "p50", "p90", "p99", "self_time")


@dataclass(frozen=True, slots=True)
class SectionStats:
    """Statistics of one section path over one window; every duration is in seconds.

    `self_time` is the total exclusive time (duration minus the time of direct children);
    `buckets` counts durations per explicit boundary of `BOUNDARIES_S`, plus one overflow
    bucket, exactly as the histogram metric reports them.
    """

    count: int
    total: float
    mean: float
    min: float
    max: float
    std: float
    p50: float
    p90: float
    p99: float
    self_time: float
    errors: int
    buckets: tuple[int, ...]

    def to_dict(self) -> dict[str, float | int | list[int]]:
        """Return the statistics as a plain dict (buckets as a list)."""
        data = asdict(self)
        data["buckets"] = list(self.buckets)
        return data


class Snapshot(Mapping[str, SectionStats]):
    """Statistics per section path since the previous `reset()`; a read-only mapping."""

    __slots__ = ("_stats", "end_ns", "rank", "start_ns")

    boundaries: tuple[float, ...] = BOUNDARIES_S

    def __init__(
        self, stats: Mapping[str, SectionStats], *, start_ns: int, end_ns: int, rank: int
    ) -> None:
        self._stats = dict(sorted(stats.items()))
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.rank = rank

    def __getitem__(self, path: str) -> SectionStats:
        return self._stats[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._stats)

    def __len__(self) -> int:
        return len(self._stats)

    def __repr__(self) -> str:
        return f"Snapshot({len(self)} paths, rank {self.rank})"

    def to_dict(self) -> dict[str, dict[str, float | int | list[int]]]:
        """Return `{path: {stat: value}}` as plain data."""
        return {path: stats.to_dict() for path, stats in self._stats.items()}

    def as_metrics(self, prefix: str = "timing") -> dict[str, float]:
        """Return flat `{prefix}.{path}.{stat}` metrics for an experiment logger.

        Statistics that are undefined for a window (NaN) are left out, since most loggers
        reject them.
        """
        head = f"{prefix}." if prefix else ""
        flat: dict[str, float] = {}
        for path, stats in self._stats.items():
            for name in METRIC_STATS:
                value = float(getattr(stats, name))
                if not math.isnan(value):
                    flat[f"{head}{path}.{name}"] = value
        return flat
