"""Read every thread's running sections from another thread, while the loop runs on.

Nothing here runs on the hot path: the reader copies each list it walks (one C call under
the GIL) and reads each interval's fields once, so a timer call that changes them at the same
moment makes the answer a moment old, never an error. A walk is bounded, so an interval
reused while it is read (`Interval.restart`) cannot send it round in circles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from looptrace._base.attributes import THREAD_ID, THREAD_NAME

if TYPE_CHECKING:
    from looptrace._core.intervals import Interval, ThreadState

MAX_OPEN: Final = 4096  # the most running intervals read from one thread


@dataclass(frozen=True, slots=True)
class OpenSection:
    """One running section of one thread: its path, step, and how long it has been open.

    `depth` is 0 for an outermost lap (a step) and grows inward; a thread's sections come
    outermost first, each after its parent.
    """

    thread_id: int
    thread_name: str
    path: str
    step: int
    seconds: float
    depth: int
    start_ns: int  # on the engine's monotonic clock

    def to_dict(self) -> dict[str, object]:
        """Return the section as plain data (what the `hang` line of the snapshot file holds)."""
        return {
            "thread_id": self.thread_id,
            "thread": self.thread_name,
            "path": self.path,
            "step": self.step,
            "seconds": round(self.seconds, 3),
            "depth": self.depth,
        }


def read_open(states: list[ThreadState], now: int) -> list[OpenSection]:
    """Return the running sections of `states` at monotonic `now`, thread by thread."""
    found: list[OpenSection] = []
    for state in states:
        try:
            found.extend(_read_thread(state, now))
        except Exception:
            continue
    return found


def _read_thread(state: ThreadState, now: int) -> list[OpenSection]:
    thread = state.thread
    thread_id = int(thread.get(THREAD_ID, 0))
    name = str(thread.get(THREAD_NAME, ""))
    found: list[OpenSection] = []
    pending: list[tuple[Interval, int]] = [(top, 0) for top in reversed(list(state.outermost))]
    while pending and len(found) < MAX_OPEN:
        interval, depth = pending.pop()
        start = interval.start
        path = interval.state.path
        found.append(
            OpenSection(
                thread_id, name, path, interval.step, max(0, now - start) / 1e9, depth, start
            )
        )
        children = list(interval.children)
        pending.extend((child, depth + 1) for child in reversed(children))
    return found
