"""Folds section durations into per-path statistics; the single sink of every measurement."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence

from looptrace._buckets import BOUNDARIES_NS, bucket_index
from looptrace._sketch import QuantileSketch
from looptrace._snapshot import SectionStats, Snapshot

_log = logging.getLogger("looptrace")

# One measurement: (path, duration ns, self time ns, ended by an exception).
Entry = tuple[str, int, int, bool]
Recorder = Callable[[Sequence[Entry]], None]

OTHER_PATH = "other"
_FOLD_AT = 4096  # entries a buffer holds before its owner folds it


class _PathAggregate:
    """Running statistics of one path: Welford mean/variance, extremes, sketch and buckets."""

    __slots__ = ("buckets", "count", "errors", "m2", "max", "mean", "min", "self_ns", "sketch")

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.min = math.inf
        self.max = -math.inf
        self.self_ns = 0
        self.errors = 0
        self.sketch = QuantileSketch()
        self.buckets = [0] * (len(BOUNDARIES_NS) + 1)

    def add(self, duration_ns: int, self_ns: int, error: bool) -> None:
        self.count += 1
        delta = duration_ns - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (duration_ns - self.mean)
        self.min = min(self.min, duration_ns)
        self.max = max(self.max, duration_ns)
        self.self_ns += self_ns
        self.errors += error
        self.sketch.add(duration_ns)
        self.buckets[bucket_index(duration_ns)] += 1

    def stats(self) -> SectionStats:
        def quantile(q: float) -> float:
            return min(max(self.sketch.quantile(q), self.min), self.max) / 1e9

        return SectionStats(
            count=self.count,
            total=self.mean * self.count / 1e9,
            mean=self.mean / 1e9,
            min=self.min / 1e9,
            max=self.max / 1e9,
            std=math.sqrt(self.m2 / self.count) / 1e9,
            p50=quantile(0.5),
            p90=quantile(0.9),
            p99=quantile(0.99),
            self_time=self.self_ns / 1e9,
            errors=self.errors,
            buckets=tuple(self.buckets),
        )


class Aggregator:
    """Collects measurements from per-thread buffers and folds them into per-path aggregates.

    Producers append to a buffer of their own (a list append, atomic under the GIL, no lock
    on the hot path); folding takes the lock, detaches what each buffer holds and adds it up.
    Distinct paths are capped: past `max_paths`, new paths are counted under `"other"` and
    one warning is logged.
    """

    def __init__(self, *, max_paths: int = 1000, recorder: Recorder | None = None) -> None:
        if max_paths < 1:
            raise ValueError(f"max_paths must be at least 1, got {max_paths}")
        self.max_paths = max_paths
        self.recorder = recorder
        self.overflowed = 0
        self._lock = threading.Lock()
        self._buffers: list[list[Entry]] = []
        self._paths: dict[str, _PathAggregate] = {}
        self._known: set[str] = set()
        self.shared = self.new_buffer()

    def new_buffer(self) -> list[Entry]:
        """Register and return a buffer for one producer (a thread's timers, a processor)."""
        buffer: list[Entry] = []
        with self._lock:
            self._buffers.append(buffer)
        return buffer

    def release_buffer(self, buffer: list[Entry]) -> None:
        """Fold what a finished producer left, then forget its buffer."""
        with self._lock:
            self._fold(buffer)
            self._buffers = [b for b in self._buffers if b is not buffer]

    def maybe_fold(self, buffer: list[Entry]) -> None:
        """Fold one buffer once it is long enough, bounding memory between resets."""
        if len(buffer) >= _FOLD_AT:
            with self._lock:
                self._fold(buffer)

    def snapshot(self, *, start_ns: int, end_ns: int, rank: int) -> Snapshot:
        """Fold every buffer, return the window's statistics and start an empty window."""
        with self._lock:
            for buffer in self._buffers:
                self._fold(buffer)
            paths, self._paths = self._paths, {}
        stats = {path: agg.stats() for path, agg in paths.items()}
        return Snapshot(stats, start_ns=start_ns, end_ns=end_ns, rank=rank)

    def clear(self) -> None:
        """Drop every buffered and aggregated measurement (a forked child starts empty)."""
        self._lock = threading.Lock()
        for buffer in self._buffers:
            buffer.clear()
        self._paths = {}

    def _fold(self, buffer: list[Entry]) -> None:
        # Appends may race with this; they land after `n` and stay for the next fold.
        n = len(buffer)
        if n == 0:
            return
        entries = buffer[:n]
        del buffer[:n]
        paths = self._paths
        recorded: list[Entry] | None = [] if self.recorder is not None else None
        for path, duration_ns, self_ns, error in entries:
            agg = paths.get(path)
            key = path
            if agg is None:
                key = self._admit(path)
                agg = paths.get(key)
                if agg is None:
                    agg = paths[key] = _PathAggregate()
            agg.add(duration_ns, self_ns, error)
            if recorded is not None:
                recorded.append((key, duration_ns, self_ns, error))
        if self.recorder is not None and recorded:
            self.recorder(recorded)

    def _admit(self, path: str) -> str:
        if path in self._known:
            return path
        if len(self._known) < self.max_paths:
            self._known.add(path)
            return path
        if not self.overflowed:
            _log.warning(
                "looptrace: more than %d distinct section paths; %r and later new paths are "
                "counted under %r",
                self.max_paths,
                path,
                OTHER_PATH,
            )
        self.overflowed += 1
        return OTHER_PATH
