"""Folds batches of section durations into per-path statistics for one window."""

from __future__ import annotations

import logging
import math
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Final, cast

from looptrace._stats.buckets import BOUNDARIES_NS
from looptrace._stats.sketch import QuantileSketch, nearest_rank
from looptrace._stats.snapshot import SectionStats, Snapshot, StatsSource
from looptrace._stats.tally import Tally

_log = logging.getLogger("looptrace")

OTHER_PATH: Final = "other"
FOLD_AT: Final = 4096  # durations a producer holds before it merges them, bounding memory
# A producer's log of ended intervals, flat: path, whole duration, and the part of it that is
# not the interval's own time in the window (its children's, and what earlier windows hold).
ENTRY_ITEMS: Final = 3
# Window time counted apart from the log's entries, rare (an interval cut by a reset, an
# error): path, window time not in any duration (`carry_ns`), self time, errors.
Adjustment = tuple[str, int, int, int]
_QUANTILES: Final = (0.5, 0.9, 0.99)  # what `SectionStats` holds: p50, p90, p99
_NO_BUCKETS: Final = (0,) * (len(BOUNDARIES_NS) + 1)
KEEP_RAW: Final = 1024  # durations a path keeps unsorted in the aggregator before it folds them
# Items of logs a window keeps ungrouped (the logs of exited threads, until the next reset):
# past it, they are grouped by path, which bounds memory when threads come and go.
MAX_UNGROUPED: Final = 4 * FOLD_AT * ENTRY_ITEMS


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

    def adjust(self, carry_ns: int, self_ns: int, errors: int) -> None:
        """Add window time that no duration holds, self time and errors."""
        self.carry_ns += carry_ns
        self.self_ns += self_ns
        self.errors += errors

    def fold(self) -> None:
        """Fold the kept durations: exact sums, one pass of the sketch, buckets by bisection."""
        durations = self.raw
        if durations is None:
            return
        self.raw = None
        durations.sort()
        total, squares = _sums(durations)
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
        _fill_buckets(buckets, durations)

    def distribution(self) -> list[tuple[float, int]]:
        """Return the window's durations as `(value_ns, count)` pairs; one thread at a time.

        Exact while every duration waits unfolded (as `stats()` reads them), else the
        sketch's buckets by their values, within its 1 %: the same data as the quantiles.
        """
        if self.sketch is None:
            return [(float(value), 1) for value in self.raw or ()]
        self.fold()
        return self.sketch.weighted()

    def stats(self) -> SectionStats:
        """Return the statistics; the caller keeps one thread at a time.

        A path whose durations all wait unfolded (fewer than `KEEP_RAW` in the window, the
        common case) gets exact quantiles from them, sorted, with no sketch to fill; one
        with more folds them and reads its sketch's, within 1 %. Neither changes what a
        later call returns.
        """
        raw = self.raw
        if self.sketch is None and raw:  # every duration of the window is here
            raw.sort()
            n = len(raw)
            total, squares = _sums(raw)
            counts = [0] * (len(BOUNDARIES_NS) + 1)
            _fill_buckets(counts, raw)
            return self._section_stats(
                n=n,
                total_ns=total,
                squares=squares,
                low=raw[0],
                high=raw[-1],
                quantiles_ns=[raw[nearest_rank(q, n)] for q in _QUANTILES],
                buckets=counts,
            )
        self.fold()
        sketch, buckets = self.sketch, self.buckets
        if sketch is None or buckets is None:  # no interval ended, only part of a running one
            return SectionStats.empty(
                total=(self.sum + self.carry_ns) / 1e9,
                self_time=self.self_ns / 1e9,
                errors=self.errors,
                buckets=_NO_BUCKETS,
            )
        return self._section_stats(
            n=self.count,
            total_ns=self.sum,
            squares=self.sumsq,
            low=self.min,
            high=self.max,
            quantiles_ns=[min(max(v, self.min), self.max) for v in sketch.quantiles(_QUANTILES)],
            buckets=buckets,
        )

    def _section_stats(
        self,
        *,
        n: int,
        total_ns: int,
        squares: int,
        low: float,
        high: float,
        quantiles_ns: list[float],
        buckets: list[int],
    ) -> SectionStats:
        """Return the statistics of `n` durations with these sums, ends and `_QUANTILES`."""
        variance = (n * squares - total_ns * total_ns) / (n * n)  # exact integers
        p50, p90, p99 = quantiles_ns
        return SectionStats(
            count=n,
            total=(total_ns + self.carry_ns) / 1e9,
            mean=total_ns / n / 1e9,
            min=low / 1e9,
            max=high / 1e9,
            std=math.sqrt(max(variance, 0.0)) / 1e9,
            p50=p50 / 1e9,
            p90=p90 / 1e9,
            p99=p99 / 1e9,
            self_time=self.self_ns / 1e9,
            errors=self.errors,
            buckets=tuple(buckets),
        )


def _sums(durations: list[int]) -> tuple[int, int]:
    """Return the sum and the sum of squares of `durations`, exact."""
    total = squares = 0
    for duration in durations:  # compiled: machine integers until a square overflows
        total += duration
        squares += duration * duration
    return total, squares


def _fill_buckets(buckets: list[int], durations: list[int]) -> None:
    """Count sorted `durations` into the histogram's `buckets`, one bisect per bucket spanned."""
    n = len(durations)
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


class Aggregator:
    """The statistics of the current window, per path.

    Producers (the timers of each thread, the span processor) log what they measure in
    lists of their own and hand them over here, holding `lock`, which is also held across a
    whole `reset()` so that a window closes at one instant: grouped by path every `FOLD_AT`
    intervals (bounding memory), or taken whole at the cut and grouped when the snapshot is
    read. Distinct paths are capped: past `max_paths`, a new path is counted under its
    parent's `"other"` (`root.train.other`; a top-level path under `"other"`), and one
    warning is logged. The overflow paths are not counted by the cap: there is one at most
    per path kept, so memory stays bounded by twice the cap.
    """

    def __init__(self, *, max_paths: int = 1000) -> None:
        # Whether windows keep each path's durations for a reader of `distribution()` (the
        # exponential histograms) once its statistics are read; set when they are configured.
        self.keep_distributions = False
        if max_paths < 1:
            raise ValueError(f"max_paths must be at least 1, got {max_paths}")
        self.max_paths = max_paths
        self.overflowed = 0
        self.lock = threading.Lock()
        self._paths: dict[str, _PathAggregate] = {}
        # Timers' logs handed over at the cut as they are, grouped when the snapshot is read.
        self._logs: list[tuple[list[object], list[Adjustment]]] = []
        self._ungrouped = 0  # items in `_logs`
        # Threads' unit counts (`Timer.count`) handed over at the cut, added when read.
        self._counts: list[dict[tuple[str, str], Tally]] = []
        self._known: set[str] = set()
        self._overflow: set[str] = set()  # the parents' `other` paths made past the cap
        self._known_lock = threading.Lock()  # not `lock`: timers are made under it too
        self._warned = False

    def merge(
        self, path: str, durations: list[int], self_ns: int, errors: int, carry_ns: int = 0
    ) -> None:
        """Add one producer's batch for `path`, taking `durations` over; the caller holds `lock`.

        `carry_ns` is window time not in `durations` (see `Adjustment`).
        """
        if not durations and not carry_ns and not self_ns:
            return
        agg = self._paths.get(path)
        if agg is None:
            path = self._admit(path)
            agg = _aggregate(self._paths, path)
        if path in self._overflow:
            self.overflowed += len(durations)
        agg.carry_ns += carry_ns
        agg.add(durations, self_ns, errors)

    def fold_log(self, log: list[object], adjustments: list[Adjustment]) -> None:
        """Group a producer's log (`ENTRY_ITEMS` per interval) by path into the window.

        The caller holds `lock`. Paths new to the window are admitted here: past the cap
        they count under their parent's `"other"`.
        """
        paths = self._paths
        before = self._overflow_count()
        group(paths, log, adjustments, self._admit)
        if self._overflow:
            self.overflowed += self._overflow_count() - before

    def _overflow_count(self) -> int:
        """Return the intervals of the window counted under an overflow path."""
        paths = self._paths
        return sum(paths[p].count for p in self._overflow if p in paths)

    def take(self, log: list[object], adjustments: list[Adjustment]) -> None:
        """Add a thread's log to the window as it is; the caller holds `lock`.

        Its paths are timers', admitted when the timers were made. It is grouped by path
        when the window's snapshot is first read: a `reset()` that closes a window of many
        paths does no work per path.
        """
        if not log and not adjustments:
            return
        if self._ungrouped >= MAX_UNGROUPED:
            self._group_logs()
        self._logs.append((log, adjustments))
        self._ungrouped += len(log) + len(adjustments)
        if self._warned:  # a timer past the cap logs its intervals under its parent's other
            overflow = self._overflow
            self.overflowed += sum(1 for path in log[::ENTRY_ITEMS] if path in overflow)

    def take_counts(self, counts: dict[tuple[str, str], Tally]) -> None:
        """Add a thread's unit counts to the window as they are; the caller holds `lock`."""
        self._counts.append(counts)

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
        counts, self._counts = self._counts, []
        if subtree is None:
            logs, self._logs, self._ungrouped = self._logs, [], 0
            paths, self._paths = self._paths, {}
        else:
            counts = self._split_counts(counts, subtree)
            self._group_logs()
            logs = []
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
            more=_Grouping(logs) if logs else None,
            keep_distributions=self.keep_distributions,
            counts=counts,
        )

    def _split_counts(
        self, counts: list[dict[tuple[str, str], Tally]], subtree: str
    ) -> list[dict[tuple[str, str], Tally]]:
        """Return the counts of `subtree`'s timers; the others stay in the window going on."""
        below = f"{subtree}."
        taken: dict[tuple[str, str], Tally] = {}
        kept: dict[tuple[str, str], Tally] = {}
        for part in counts:
            for key, tally in part.items():
                into = taken if key[0] == subtree or key[0].startswith(below) else kept
                found = into.get(key)
                if found is None:
                    into[key] = Tally(tally.total, tally.flops, tally.priced)
                else:
                    found.total += tally.total
                    found.flops += tally.flops
                    found.priced += tally.priced
        if kept:
            self._counts.append(kept)
        return [taken] if taken else []

    def _group_logs(self) -> None:
        """Group the logs handed over so far into the window's per-path statistics."""
        _group_all(self._paths, self._logs)
        self._logs, self._ungrouped = [], 0

    def after_fork_in_child(self) -> None:
        """Start empty with a fresh lock: a forked child counts only its own sections."""
        self.lock = threading.Lock()
        self._known_lock = threading.Lock()
        self._paths = {}
        self._logs, self._ungrouped = [], 0
        self._counts = []

    def admit(self, path: str) -> str:
        """Return `path` if it is or can be kept apart, else its parent's `"other"`.

        Timers ask when they are made, so a name past the cap creates no state of its own.
        """
        return self._admit(path)

    def _admit(self, path: str) -> str:
        if path in self._known or path in self._overflow:
            return path
        with self._known_lock:
            if len(self._known) < self.max_paths:
                self._known.add(path)
                return path
        if not self._warned:
            self._warned = True
            _log.warning(
                "looptrace: more than %d distinct section paths; %r and later new paths are "
                "counted under their parent's %r",
                self.max_paths,
                path,
                OTHER_PATH,
            )
        return self.overflow_of(path.rpartition(".")[0])

    def overflow_of(self, parent: str) -> str:
        """Return the path the children of `parent` past the cap count under (one object)."""
        path = f"{parent}.{OTHER_PATH}" if parent else OTHER_PATH
        with self._known_lock:
            for known in self._overflow:  # the one object timers and windows compare by identity
                if known == path:
                    return known
            self._overflow.add(path)
        return path


def group(
    paths: dict[str, _PathAggregate],
    log: list[object],
    adjustments: list[Adjustment],
    admit: Callable[[str], str],
) -> None:
    """Add a log's intervals and adjustments to `paths`, by path.

    `admit` names the path a path new to `paths` is counted under.
    """
    found: dict[str, _PathAggregate] = {}  # by the logged path (admitted once per call)
    for i in range(0, len(log), ENTRY_ITEMS):
        path = cast("str", log[i])
        agg = found.get(path)
        if agg is None:
            agg = found[path] = _aggregate(paths, admit(path))
        whole = cast("int", log[i + 1])
        raw = agg.raw
        if raw is None:
            agg.raw = raw = []
        raw.append(whole)
        agg.count += 1
        agg.self_ns += whole - cast("int", log[i + 2])
        if len(raw) >= KEEP_RAW:
            agg.fold()
    for path, carry_ns, self_ns, errors in adjustments:
        agg = found.get(path)
        if agg is None:
            agg = found[path] = _aggregate(paths, admit(path))
        agg.adjust(carry_ns, self_ns, errors)


def _aggregate(paths: dict[str, _PathAggregate], path: str) -> _PathAggregate:
    """Return the aggregate of `path` in `paths`, made if new."""
    agg = paths.get(path)
    if agg is None:
        agg = paths[path] = _PathAggregate()
    return agg


def _group_all(
    paths: dict[str, _PathAggregate], logs: list[tuple[list[object], list[Adjustment]]]
) -> None:
    """Group timers' logs (paths admitted when the timers were made) into `paths`."""
    for log, adjustments in logs:
        group(paths, log, adjustments, _as_is)


def _as_is(path: str) -> str:
    """Admit a path as it is (a timer's, admitted when the timer was made)."""
    return path


class _Grouping:
    """Groups the logs a window was handed, when its snapshot is first read."""

    def __init__(self, logs: list[tuple[list[object], list[Adjustment]]]) -> None:
        self.logs = logs

    def __call__(self, stats: dict[str, SectionStats | StatsSource]) -> None:
        # Called before anything is read: every value is still a `_PathAggregate`.
        _group_all(cast("dict[str, _PathAggregate]", stats), self.logs)
        self.logs = []
