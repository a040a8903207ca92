"""Clocks: monotonic nanoseconds for durations, one wall-clock anchor for timestamps."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What looptrace reads time from.

    Durations use `monotonic_ns` only. Span timestamps are `time_ns()` read once at
    configuration plus the monotonic delta, so a wall-clock jump never changes a duration.
    """

    def monotonic_ns(self) -> int:
        """Return a monotonic reading in nanoseconds."""
        ...

    def time_ns(self) -> int:
        """Return the wall-clock time in nanoseconds since the Unix epoch."""
        ...


class MonotonicClock:
    """The host clock: `time.perf_counter_ns` for durations, `time.time_ns` for the anchor."""

    __slots__ = ()

    monotonic_ns = staticmethod(time.perf_counter_ns)
    time_ns = staticmethod(time.time_ns)


class EpochAnchor:
    """Maps monotonic readings of one clock onto epoch nanoseconds."""

    __slots__ = ("offset_ns",)

    def __init__(self, clock: Clock) -> None:
        self.offset_ns = clock.time_ns() - clock.monotonic_ns()

    def epoch_ns(self, monotonic_ns: int) -> int:
        """Return the epoch timestamp of a monotonic reading."""
        return self.offset_ns + monotonic_ns


MANUAL_EPOCH_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z, so timestamps are reproducible


class ManualClock:
    """A clock that moves only when told to: exact durations for tests and the simulated demo.

    `looptrace.testing.FakeClock` is this class.
    """

    __slots__ = ("_epoch_ns", "_now_ns")

    def __init__(self, start_s: float = 1000.0, epoch_ns: int = MANUAL_EPOCH_NS) -> None:
        self._now_ns = round(start_s * 1e9)
        self._epoch_ns = epoch_ns - self._now_ns

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds` (never backward)."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back: advance({seconds})")
        self._now_ns += round(seconds * 1e9)

    def monotonic_ns(self) -> int:
        """Return the manual monotonic time."""
        return self._now_ns

    def time_ns(self) -> int:
        """Return the manual wall-clock time, a fixed epoch plus the monotonic time."""
        return self._epoch_ns + self._now_ns
