"""Folds batches of section durations into per-path statistics for one window."""

from __future__ import annotations

import logging
import math
import threading
from bisect import bisect_left, bisect_right
from typing import Final

from looptrace._stats.buckets import BOUNDARIES_NS
from looptrace._stats.sketch import QuantileSketch
from looptrace._stats.snapshot import SectionStats, Snapshot

_log = logging.getLogger("looptrace")

OTHER_PATH: Final = "other"
FOLD_AT: Final = 4096  # durations a producer holds before it merges them, bounding memory
_NO_BUCKETS: Final = (0,) * (len(BOUNDARIES_NS) + 1)
KEEP_RAW: Final = 1024  # durations a path keeps unsorted in the aggregator before it folds them


class _PathAggregate:
    """Statistics of one path, kept as exact integer sums of nanoseconds.

    Durations are kept as they come, unsorted, and folded into the sums, the sketch and the
    buckets in sorted batches of `KEEP_RAW` or more, or when the statistics are first read:
    `reset()` hands a window's aggregates over without folding what a path gathered in it.
    """

    __slots__ = (
        "buckets",
        "carry_ns",
        "count",
        "errors",
        "max",
        "min",
        "raw",
        "self_ns",
        "sketch",
        "sum",
        "sumsq",
    )

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0
        self.sumsq = 0
        self.min = math.inf
        self.max = -math.inf
        self.self_ns = 0
        self.errors = 0
        self.carry_ns = 0  # window time of intervals cut by a reset, not in `sum`
        self.raw: list[int] | None = None  # durations not folded yet: a producer's own list
        # Made at the first fold: a path that only ran a few times in a window costs
        # `reset()` one small object.
        self.sketch: QuantileSketch | None = None
        self.buckets: list[int] | None = None

    def add(self, durations: list[int], self_ns: int, errors: int) -> None:
        """Keep a batch of durations (the list is taken over); fold once `KEEP_RAW` wait."""
        self.self_ns += self_ns
        self.errors += errors
        if not durations:
            return
        self.count += len(durations)
        raw = self.raw
        if raw is None:
            self.raw = raw = durations
        else:
            raw.extend(durations)
        if len(raw) >= KEEP_RAW:
            self.fold()

    def fold(self) -> None:
        """Fold the kept durations: exact sums, one bisect per bucket they fill."""
        durations = self.raw
        if durations is None:
            return
        self.raw = None
        durations.sort()
        n = len(durations)
        total = squares = 0
        for duration in durations:  # compiled: machine integers until a square overflows
            total += duration
            squares += duration * duration
        self.sum += total
        self.sumsq += squares
        self.min = min(self.min, durations[0])
        self.max = max(self.max, durations[-1])
        sketch = self.sketch
        if sketch is None:
            sketch = self.sketch = QuantileSketch()
        sketch.add_sorted(durations)
        buckets = self.buckets
        if buckets is None:
            buckets = self.buckets = [0] * (len(BOUNDARIES_NS) + 1)
        first = bisect_left(BOUNDARIES_NS, durations[0])  # a bucket holds values <= its bound
        last = bisect_left(BOUNDARIES_NS, durations[-1])
        if last - first >= n:  # few durations over many buckets: place each one
            for duration in durations:
                buckets[bisect_left(BOUNDARIES_NS, duration)] += 1
            return
        below = 0  # many durations: one bisect per bucket they span
        for i in range(first, last):
            upto = bisect_right(durations, BOUNDARIES_NS[i], below)
            buckets[i] += upto - below
            below = upto
        buckets[last] += n - below

    def stats(self) -> SectionStats:
        """Fold what is kept and return the statistics; the caller keeps one thread at a time."""
        self.fold()
        n = self.count
        total = (self.sum + self.carry_ns) / 1e9
        sketch, buckets = self.sketch, self.buckets
        if sketch is None or buckets is None:  # no interval ended, only part of a running one
            nan = math.nan
            return SectionStats(
                count=0,
                total=total,
                mean=nan,
                min=nan,
                max=nan,
                std=nan,
                p50=nan,
                p90=nan,
                p99=nan,
                self_time=self.self_ns / 1e9,
                errors=self.errors,
                buckets=_NO_BUCKETS,
            )

        p50, p90, p99 = (
            min(max(value, self.min), self.max) / 1e9
            for value in sketch.quantiles((0.5, 0.9, 0.99))
        )

        variance = (n * self.sumsq - self.sum * self.sum) / (n * n)  # exact integers
        return SectionStats(
            count=n,
            total=total,
            mean=self.sum / n / 1e9,
            min=self.min / 1e9,
            max=self.max / 1e9,
            std=math.sqrt(max(variance, 0.0)) / 1e9,
            p50=p50,
            p90=p90,
            p99=p99,
            self_time=self.self_ns / 1e9,
            errors=self.errors,
            buckets=tuple(buckets),
        )


class Aggregator:
    """The statistics of the current window, per path.

    Producers (the timers of each thread, the span processor) keep raw durations of their own
    and merge them here in batches, holding `lock`, which is also held across a whole
    `reset()` so that a window closes at one instant. Distinct paths are capped: past
    `max_paths`, new paths are counted under `"other"` and one warning is logged.
    """

    def __init__(self, *, max_paths: int = 1000) -> None:
        if max_paths < 1:
            raise ValueError(f"max_paths must be at least 1, got {max_paths}")
        self.max_paths = max_paths
        self.overflowed = 0
        self.lock = threading.Lock()
        self._paths: dict[str, _PathAggregate] = {}
        self._known: set[str] = set()
        self._known_lock = threading.Lock()  # not `lock`: timers are made under it too
        self._warned = False

    def merge(
        self, path: str, durations: list[int], self_ns: int, errors: int, carry_ns: int = 0
    ) -> None:
        """Add one producer's batch for `path`, taking `durations` over; the caller holds `lock`.

        `carry_ns` is window time not in `durations` (see `NodeState.carry_ns`).
        """
        if not durations and not carry_ns and not self_ns:
            return
        paths = self._paths
        agg = paths.get(path)
        if agg is None:
            if path not in self._known:  # (a timer's path is admitted when the timer is made)
                path = self._admit(path)
                agg = paths.get(path)
            if agg is None:
                agg = paths[path] = _PathAggregate()
        if path == OTHER_PATH:
            self.overflowed += len(durations)
        agg.carry_ns += carry_ns
        agg.add(durations, self_ns, errors)

    def snapshot(
        self,
        *,
        start_ns: int,
        end_ns: int,
        rank: int,
        step: int | None = None,
        subtree: str | None = None,
    ) -> Snapshot:
        """Return the window's statistics and start an empty window; the caller holds `lock`.

        With `subtree` (a timer's path) only the paths of that timer and its descendants are
        taken; the other paths' windows go on.
        """
        if subtree is None:
            paths, self._paths = self._paths, {}
        else:
            below = f"{subtree}."
            taken = [p for p in self._paths if p == subtree or p.startswith(below)]
            paths = {p: self._paths.pop(p) for p in taken}
        return Snapshot(
            paths,
            start_ns=start_ns,
            end_ns=end_ns,
            rank=rank,
            step=step,
            subtree=subtree or "root",
        )

    def after_fork_in_child(self) -> None:
        """Start empty with a fresh lock: a forked child counts only its own sections."""
        self.lock = threading.Lock()
        self._known_lock = threading.Lock()
        self._paths = {}

    def admit(self, path: str) -> str:
        """Return `path` if it is or can be kept apart, else `"other"`.

        Timers ask when they are made, so a name past the cap creates no state of its own.
        """
        return self._admit(path)

    def _admit(self, path: str) -> str:
        if path in self._known and path != OTHER_PATH:
            return path
        with self._known_lock:
            if len(self._known) < self.max_paths and path != OTHER_PATH:
                self._known.add(path)
                return path
        if not self._warned:
            self._warned = True
            _log.warning(
                "looptrace: more than %d distinct section paths; %r and later new paths are "
                "counted under %r",
                self.max_paths,
                path,
                OTHER_PATH,
            )
        return OTHER_PATH
