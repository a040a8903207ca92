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
