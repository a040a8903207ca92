"""Which window a cross-rank reduce closes: a count of closed windows per timer, and realignment.

Every `reset()` closes a window of a subtree (`"root"` for `lt.reset()`, the timer's path for
`timer.reset()`), whether it reduces across ranks or not. The count of those closes travels in
the header of the reduce, so ranks whose `i`-th reduce closes different windows (a rank reset
without `across_ranks=True`, or its reduce failed before it could take part) find out at once:
every rank skips that reduce, and each rank that closed fewer windows than the most skips as
many of its next reduces, so that from then on every rank reduces the same window.

A rank that does not call `reset()` at all has one longer window: nothing tells that apart.
"""

from __future__ import annotations

import threading

# The count wraps at 2^30 windows so that it packs beside 32-bit fields in the reduce's header.
WINDOW_BITS = 30


class Skipped(Exception):  # noqa: N818 - what happened to the reduce, not an error of the caller
    """Every rank of the job decided alike not to reduce this window; the message says why."""


class PeerFailed(Skipped):
    """A rank failed during this reduce: every rank saw its mark and drops the window alike."""

    def __init__(self) -> None:
        super().__init__(
            "a rank failed during reset(across_ranks=True): no rank reduces this window"
        )


class Misaligned(Skipped):
    """The ranks' reduces close different windows: `earliest` to `latest`, this one `window`."""

    def __init__(self, window: int, earliest: int, latest: int) -> None:
        super().__init__(
            f"reset(across_ranks=True) closes window {window} of this rank while the ranks' "
            f"windows run from {earliest} to {latest} (a rank reset without across_ranks=True "
            "or could not take part in a reduce): no rank reduces this window, and the ranks "
            "behind skip as many reduces as they are behind, so that the next ones reduce the "
            "same window on every rank"
        )
        self.window, self.earliest, self.latest = window, earliest, latest


class Windows:
    """The windows each subtree closed in this process, and the reduces owed to realign."""

    __slots__ = ("_closed", "_lock", "_owed")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed: dict[str, int] = {}
        self._owed: dict[str, int] = {}

    def close(self, subtree: str) -> int:
        """Count a window of `subtree` closed and return its number (from 1, wrapping)."""
        with self._lock:
            number = (self._closed.get(subtree, 0) + 1) % (1 << WINDOW_BITS)
            self._closed[subtree] = number
            return number

    def owe(self, subtree: str, reduces: int) -> None:
        """Skip the next `reduces` reduces of `subtree`: this rank closed fewer windows."""
        with self._lock:
            self._owed[subtree] = self._owed.get(subtree, 0) + reduces

    def take_owed(self, subtree: str) -> bool:
        """Return whether this reduce of `subtree` is one to skip (counting it skipped)."""
        with self._lock:
            owed = self._owed.get(subtree, 0)
            if owed <= 0:
                return False
            self._owed[subtree] = owed - 1
            return True


WINDOWS = Windows()
