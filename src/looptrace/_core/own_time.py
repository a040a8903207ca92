"""looptrace's own time inside `reset()` is taken out of the laps of the thread that reset.

A `reset()` called inside a running lap (the usual `reset()` every N steps of a loop that
laps its timer) spends the cross-rank reduce, the outputs and the `on_reset` hooks inside that
lap. Left there, it would be the lap's self time, make the step a slow one and feed a
throughput drop. At the end of the reset the calling thread's running intervals move forward
by the reset's time: their start (the lap's duration) and their current segment (the window's
total and self time) skip it. The reset's time is reported as `Snapshot.overhead` instead.

Only the thread that ran the reset is moved: other threads' laps went on meanwhile. The
compact records of its untraced laps (slow laps, `looptrace._core.slow_laps`) move with them,
so a slow lap's trace shows the lap as it was counted, without looptrace's time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from looptrace._core.intervals import ThreadState, descendants
from looptrace._core.slow_laps import ENTRY_ITEMS

if TYPE_CHECKING:
    from looptrace._core.engine import Engine


def skip_own_time(engine: Engine, began: int, ended: int) -> None:
    """Move the calling thread's running intervals past looptrace's time `began`..`ended`.

    An instant before `began` moves by the whole of it, one inside it to `ended`, one after
    it stays: the order of every start and end is kept. A thread inside a timer call (a
    signal handler's reset) is left as it is.
    """
    state: ThreadState | None = getattr(engine.local, "state", None)
    spent = ended - began
    if state is None or spent <= 0 or state.busy or not state.outermost:
        return
    with engine.aggregator.lock:  # no window closes while the thread's intervals move
        if not state.claim(0.0):
            return
        try:
            _move(state, began, ended)
        finally:
            state.unclaim()


def _move(state: ThreadState, began: int, ended: int) -> None:
    """Move the state's running host intervals and its slow-lap record past `began`..`ended`."""
    spent = ended - began

    def moved(at: int) -> int:
        return at + spent if at <= began else max(at, ended)

    for top in list(state.outermost):
        for interval in (top, *descendants(top)):
            if interval.device is None:
                interval.start = moved(interval.start)
                interval.seg_start = moved(interval.seg_start)
    record = state.record
    if record is not None:
        for index in range(0, len(record), ENTRY_ITEMS):
            for item in (index + 1, index + 2):
                at = record[item]
                if isinstance(at, int):
                    record[item] = moved(at)
