"""Windows handed over by `reset()`, waiting for an output's own thread: bounded, in order.

`reset()` runs on the training thread and must not wait for an output: it only appends its
window here (constant work, whatever the window holds) and wakes the output's thread, which
folds or writes the windows in the order they closed. When an output falls `MAX_QUEUED_WINDOWS`
behind (a stalled filesystem, a thread starved of CPU), further windows are dropped, counted
in `Looptrace.health().dropped_windows` (the first drop of each output is logged) and handed
to the output as a count with the next windows it takes, so it can record the gap.
"""

from __future__ import annotations

import threading
from typing import Final

from looptrace._stats.health import Incidents
from looptrace._stats.snapshot import Snapshot

# Windows an output may fall behind before new ones are dropped. A window holds at most the
# aggregator's ungrouped log and one aggregate per path, so this bounds the memory held here.
MAX_QUEUED_WINDOWS: Final = 256


class WindowQueue:
    """A bounded queue of closed windows for one output; safe across threads."""

    def __init__(self, incidents: Incidents, output: str, bound: int = MAX_QUEUED_WINDOWS) -> None:
        """Queue windows for `output` (named in the log line of its first drop)."""
        self._incidents = incidents
        self._output = output
        self._bound = bound
        self._lock = threading.Lock()
        self._windows: list[Snapshot] = []
        self._dropped = 0  # windows refused since the last take, all newer than those queued

    def put(self, snapshot: Snapshot) -> bool:
        """Queue `snapshot`; when `bound` windows wait already, drop it and count it (False)."""
        with self._lock:
            full = len(self._windows) >= self._bound
            if full:
                self._dropped += 1
            else:
                self._windows.append(snapshot)
        if full:
            self._incidents.windows_dropped(
                self._output, f"{self._output} is {self._bound} windows behind"
            )
        return not full

    def take(self) -> tuple[list[Snapshot], int]:
        """Return the queued windows, oldest first, and how many were dropped after them."""
        with self._lock:
            taken, self._windows = self._windows, []
            dropped, self._dropped = self._dropped, 0
        return taken, dropped

    def after_fork_in_child(self) -> None:
        """Start empty with a fresh lock: the parent's windows are the parent's to deliver."""
        self._lock = threading.Lock()
        self._windows = []
        self._dropped = 0
