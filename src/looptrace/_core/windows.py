"""Reset windows: cutting every thread's running intervals, merging, exited threads, fork."""

from __future__ import annotations

from typing import TYPE_CHECKING

from looptrace._base.attributes import THREAD_NAME
from looptrace._core.intervals import (
    CLAIM_TIMEOUT_S,
    Interval,
    ThreadState,
    descendants,
    slot_list,
)
from looptrace._core.slow_laps import SlowLaps

if TYPE_CHECKING:
    from looptrace._core.engine import Engine


class Windows:
    """Closes the engine's reset windows; the lap engine itself only starts and ends intervals.

    Lock order: the aggregator's lock before any thread state's claim.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.claim_timeout_s = CLAIM_TIMEOUT_S  # the longest wait for a timer call under way

    def close_exited_if_free(self) -> None:
        """Close exited threads now if no `reset()` is running (else the next one does)."""
        lock = self.engine.aggregator.lock
        if lock.acquire(blocking=False):  # else the next reset() does it
            try:
                self.close_exited()
            finally:
                lock.release()

    def steps_done(self, subtree: str | None = None) -> int | None:
        """Return how many outermost laps the calling thread has completed (None: no laps).

        With several outermost timers, the largest count. It is the step a `reset()` window
        closes at: the spans of that window have `looptrace.step` below it. With `subtree` (a
        timer's path), only that timer and its descendants count.
        """
        mine: ThreadState | None = getattr(self.engine.local, "state", None)
        # Without a state of its own (a signal's helper thread): the most laps of any thread.
        states = [mine] if mine is not None else self.engine.states.all()
        done = [
            node.laps - any(interval.state is node for interval in state.outermost)
            for state in states
            for node in list(state.tops)
            if _within(node.path, subtree)
        ]
        return max(done, default=None)

    def steps_begun(self, subtree: str | None = None) -> int | None:
        """Return how many outermost laps the calling thread has begun (None: no laps).

        Chosen as `steps_done` chooses; one more than it while a lap runs. The last step a
        window holds part of is one less.
        """
        mine: ThreadState | None = getattr(self.engine.local, "state", None)
        states = [mine] if mine is not None else self.engine.states.all()
        begun = [
            node.laps
            for state in states
            for node in list(state.tops)
            if _within(node.path, subtree)
        ]
        return max(begun, default=None)

    def trace_next(self, subtree: str | None = None) -> None:
        """Trace the next lap of each outermost timer (of `subtree`) in full, on any sampling.

        The calling thread's timers (every thread's, from a thread with no state), as
        `steps_begun` counts them: the lap begun next has the index of the laps begun so far,
        the same on every rank that reaches this point after the same steps.
        """
        mine: ThreadState | None = getattr(self.engine.local, "state", None)
        states = [mine] if mine is not None else self.engine.states.all()
        laps = {
            node.path: node.laps
            for state in states
            for node in list(state.tops)
            if _within(node.path, subtree)
        }
        if laps:
            self.engine.spans.force(laps)

    def merge_pending(self, state: ThreadState) -> None:
        """Group a thread's log into the window now that it is full (bounds memory)."""
        aggregator = self.engine.aggregator
        with aggregator.lock:  # its owner, outside a timer call: no claimer can be at work
            state.merge_all(aggregator)
            SlowLaps.bound(state)

    def close(self, now: int, *, final: bool = False, subtree: str | None = None) -> None:
        """Cut every running interval and merge everything measured before the cut.

        Each thread is cut at one instant, read while its state is claimed: a thread that lapped
        after `reset()` read `now` has that lap in this window and nothing before its cut in
        the next, so no time is counted twice or lost. The caller holds the aggregator's
        lock, so no measurement after a cut can reach this window. With `subtree` (a timer's
        path) only the intervals of that timer and its descendants are cut.

        A `final` window (shutdown) closes the engine first, so no timer call starts anything
        after it, then ends every running interval instead, its span marked as cut, and leaves
        each state closed for good (`ThreadState.close`). A thread whose timer call outlasts
        the claim's bound is not waited for: in a reset its intervals run on into the next
        window; at shutdown its owner ends them at its next call (`Engine.refuse`).
        """
        engine = self.engine
        if final:
            engine.closed = True
        self.close_exited()
        for state in engine.states.all():
            if not state.claim(self.claim_timeout_s):
                self._busy_too_long(state, final)
                continue
            try:
                cut_at = max(now, engine.now())
                state.last_cut = cut_at
                if final:
                    for top in reversed(state.outermost):
                        engine.end(state, top, cut_at, cut=True)
                    self._flush_slow_laps(state)
                elif subtree is None:
                    for top in state.outermost:
                        self.cut(state, top, cut_at)
                else:
                    self._cut_subtree(state, subtree, cut_at)
                self._drain(state)
            finally:
                if final:
                    state.close()
                else:
                    state.unclaim()

    def _busy_too_long(self, state: ThreadState, final: bool) -> None:
        """Note a thread left out of a window: its timer call outlasted the claim's bound."""
        engine = self.engine
        if final:
            state.final = True
            engine.left.append(state)
        engine.incidents.stalled(
            "claim",
            f"a timer call of thread {state.thread.get(THREAD_NAME)!r} took longer than "
            f"{self.claim_timeout_s:g} s; "
            + (
                "its running sections end at its next timer call"
                if final
                else "its sections go on into the next window"
            ),
        )

    def _cut_subtree(self, state: ThreadState, subtree: str, now: int) -> None:
        """Cut the running intervals of the timer at path `subtree` and of its descendants."""
        below = f"{subtree}."
        pending = list(state.outermost)
        while pending:
            interval = pending.pop()
            path = interval.node.path
            if path == subtree or path.startswith(below):
                self.cut(state, interval, now)
            else:
                pending.extend(interval.children)

    def close_exited(self) -> None:
        """End what exited threads left running, at their exit; holds the aggregator lock."""
        exited = self.engine.states.exited
        for _ in range(len(exited)):
            state, at = exited.popleft()
            if not state.claim(self.claim_timeout_s):  # a task done inside a timer call
                exited.append((state, at))  # the next close tries again
                continue
            try:
                if self.engine.states.retire(state):
                    at = max(at, state.last_cut)
                    for top in reversed(state.outermost):
                        self.engine.end(state, top, at)
                    self._flush_slow_laps(state)
                    self._drain(state)
            finally:
                state.unclaim()

    def _flush_slow_laps(self, state: ThreadState) -> None:
        """Export the slow laps a thread's last windows kept; its laps end for good."""
        slow = self.engine.slow
        if slow is not None:
            slow.flush(state)

    def _drain(self, state: ThreadState) -> None:
        """Wait for the thread's device events and hand over all it measured; it is claimed.

        The thread's log goes to the window whole, grouped by path when the snapshot is read:
        a timer call of the thread waits for no work per path.
        """
        if state.device is not None:
            self.engine.device.resolve(state, wait=True)
        state.hand_over(self.engine.aggregator)

    def after_fork_in_child(self) -> None:
        """Keep only the forking thread's state, unclaimed, with nothing counted yet."""
        state = self.engine.states.after_fork_in_child()
        if state is None:
            return
        state.renew_lock()
        state.drop_all()
        now = self.engine.now()
        pending = list(state.outermost)
        while pending:
            interval = pending.pop()
            interval.seg_start = interval.start = now
            interval.child_ns = 0
            interval.span = interval.context = None
            interval.device = None  # a forked child cannot use its parent's device context
            pending.extend(interval.children)
        state.device = None
        state.watched, state.recording, state.record = slot_list(), slot_list(), None
        for node in state.tops:  # the parent exports its slow laps; the child has none yet
            if node.lap_times is not None:
                node.lap_times.candidates = []

    def forget_running(self) -> None:
        """Drop the calling thread's running intervals, uncounted (a child of `multiprocessing`).

        The child never returns to the code that started them, so nothing would end them
        but its exit, which would count its whole life as their time.
        """
        state: ThreadState | None = getattr(self.engine.local, "state", None)
        if state is None:
            return
        for node in state.nodes.values():
            node.stack = slot_list()
            node.entry = None
            node.spare = None
        state.outermost = slot_list()

    def cut(self, state: ThreadState, interval: Interval, now: int) -> None:
        """Count the part of a running interval before `now`; the rest goes to the next window."""
        if interval.children:
            for descendant in reversed(descendants(interval)):
                self._cut_one(state, descendant, now)
        self._cut_one(state, interval, now)

    def _cut_one(self, state: ThreadState, interval: Interval, now: int) -> None:
        """Cut `interval` alone; its running children are cut already.

        The part before the cut goes into this window's total and self time; the interval is
        counted (count, min, max, quantiles, buckets) once, whole, in the window it ends in.
        """
        duration = now - interval.seg_start
        if duration > 0:
            if interval.device is None:
                state.count_cut(interval.state.path, duration, interval.child_ns)
            else:
                self.engine.device.cut(state, interval)
            if interval.parent is not None:
                interval.parent.child_ns += duration
        interval.seg_start = now
        interval.child_ns = 0


def _within(path: str, subtree: str | None) -> bool:
    """Whether `path` is the timer at path `subtree` or one of its descendants (None: all)."""
    return subtree is None or path == subtree or path.startswith(f"{subtree}.")
