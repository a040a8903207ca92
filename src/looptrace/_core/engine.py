"""Running intervals per thread: starting, ending, nesting, and cutting them at `reset()`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context

from looptrace._base.attributes import STEP_OF
from looptrace._core import ranges as _ranges
from looptrace._core.clock import Clock, EpochAnchor
from looptrace._core.device import DeviceClock, DeviceTiming
from looptrace._core.ids import StepTraces
from looptrace._core.intervals import (
    Interval,
    NodeState,
    ThreadState,
    descendants,
    discard,
    find,
)
from looptrace._core.sampling import LapSampler
from looptrace._core.slow_laps import SlowLaps
from looptrace._core.spans import LapSpans
from looptrace._core.states import States
from looptrace._core.windows import Windows
from looptrace._stats.aggregator import Aggregator
from looptrace._stats.health import Incidents

if TYPE_CHECKING:
    from looptrace._core.timer import Timer
    from looptrace._stats.snapshot import Snapshot


class Engine:
    """Shared machinery of one `Looptrace`: clock, tracing, and every thread's timers.

    Lock order: the aggregator's lock before any thread state's claim.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        aggregator: Aggregator,
        tracer: trace.Tracer | None,
        sampler: LapSampler,
        step_traces: StepTraces | None = None,
        span_attributes: dict[str, int],
        incidents: Incidents,
        device_clock: DeviceClock | None = None,
        slow_lap_factor: float | None = None,
    ) -> None:
        self.now = clock.monotonic_ns
        self.anchor = EpochAnchor(clock)
        self.aggregator = aggregator
        self.tracer = tracer
        self.sampler = sampler
        self.step_traces = step_traces
        self.incidents = incidents
        self.spans = LapSpans(
            tracer,
            sampler,
            step_traces=step_traces,
            anchor=self.anchor,
            span_attributes=span_attributes,
            incidents=incidents,
        )
        self.closed = False
        # Paths marked as sections where ranks wait for each other (`wait=True`): replaced,
        # never changed, so a window's close reads them without a lock.
        self.wait_paths: frozenset[str] = frozenset()
        self._marking = threading.Lock()
        # Whether the in-place paths run (`lap`, `switch_in_place`, a section's entry and exit
        # of `SectionEntry`, a never-lapped timer's step there); off only in tests, which
        # compare them with the general path.
        self.in_place = True
        # States `shutdown()` could not close (a timer call under way outlasted its wait):
        # each one's owner ends what it left running at its next call (`refuse`).
        self.left: list[ThreadState] = []
        # Closes the window of one timer's subtree; set by the `Looptrace` that owns this.
        self.reset_timer: Callable[[Timer, bool], Snapshot] | None = None
        self.states = States(self.now)
        self.windows = Windows(self)
        self.states.on_new = self.windows.close_exited_if_free
        self.local = self.states.local
        self.state = self.states.state
        self.device = DeviceTiming(device_clock, tracer, self.anchor, incidents, self.spans.base)
        # Traces untraced laps much slower than their timer's recent median (None: off).
        self.slow: SlowLaps | None = None
        if tracer is not None and slow_lap_factor is not None:
            self.slow = SlowLaps(
                slow_lap_factor,
                tracer,
                anchor=self.anchor,
                span_base=self.spans.base,
                step_traces=step_traces,
                incidents=incidents,
                memory=self.spans.memory,
            )

    def mark_wait(self, path: str) -> None:
        """Mark `path` as a section where ranks wait for each other (its role is `wait`)."""
        with self._marking:
            self.wait_paths = self.wait_paths | {path}

    def refuse(self, message: str) -> None:
        """Count a timer call after `shutdown()`, which does nothing, as misuse.

        A thread that `shutdown()` could not wait for ends here, at its first call after it,
        what it left running: cut, as shutdown ends the running intervals of other threads.
        """
        self.incidents.misused("closed", message)
        if self.left:
            state = self.states.state()
            if state in self.left and not state.busy:
                self.left.remove(state)
                state.busy = True
                try:
                    now = self.now()
                    for top in reversed(state.outermost):
                        self.end(state, top, now, cut=True)
                finally:
                    state.busy = False

    # -- intervals -----------------------------------------------------------------------

    def parent_for(self, state: ThreadState, node: Timer) -> Interval | None:
        """Return the innermost running interval of the nearest running ancestor of `node`."""
        ancestor = node.parent
        nodes = state.nodes
        while ancestor is not None:
            found = nodes.get(ancestor)
            if found is not None and found.stack:
                return found.stack[-1]
            ancestor = ancestor.parent
        return None

    def start(
        self,
        state: ThreadState,
        node: Timer,
        now: int,
        parent: Interval | None,
        node_state: NodeState | None = None,
        *,
        implicit: bool = False,
    ) -> Interval:
        """Start an interval of `node` at `now`, nested in `parent` (None: a new outermost lap).

        `node_state` is the state of `node` in this thread, if the caller has it at hand.
        `implicit`: a step of a never-lapped timer that a section entry starts, which ends
        with that section (`Interval.implicit`). On the host it has no span of its own: its
        context waits for the section, whose span is the step's root (one span a request).
        """
        if node_state is None:
            node_state = find(state, node) or state.node(node)
        if parent is None:
            _ranges.find_profiler()
            step = node_state.next_lap()
            context = self.spans.lap_context(node, step)
            thread: dict[str, str | int] | None = state.thread
        else:
            step = parent.step
            no_trace = parent.span is None and parent.device is None and parent.context is None
            context = None if no_trace else self.spans.child_context(parent)
            thread = step_root(state, parent)
        if node.device and self.device.available():
            interval = Interval(node, node_state, parent, now, step, None)
            self.device.open(state, interval, context, now)
        else:
            span = None
            if context is not None and not implicit:
                span = self.spans.start(node, context, now, step, thread)
            spare = node_state.spare
            if spare is None:
                interval = Interval(node, node_state, parent, now, step, span)
            else:
                node_state.spare = None
                interval = spare.restart(parent, now, step, span)
        if parent is None:
            self._lap_started(state, interval, context, implicit)
        else:
            parent.children.append(interval)
            if thread is not None and self.step_traces is not None:
                self.step_traces.done()  # (the ids its never-lapped step's context pinned)
        node_state.stack.append(interval)
        if _ranges.active():
            _ranges.begin(interval)
        return interval

    def _lap_started(
        self, state: ThreadState, interval: Interval, context: Context | None, implicit: bool
    ) -> None:
        """Keep a new outermost `interval` (of trace `context`) running, watched if slow."""
        interval.implicit = implicit
        if implicit and interval.device is None:
            interval.context = context  # (its section's span takes the pinned ids)
        elif context is not None and self.step_traces is not None:
            self.step_traces.done()  # a device lap's span comes later, without pinned ids
        state.outermost.append(interval)
        slow = self.slow
        if (
            slow is not None
            and interval.device is None
            and (context is not None or self.spans.spans_read())
        ):
            slow.begin(state, interval, record=context is None)

    def end(
        self,
        state: ThreadState,
        interval: Interval,
        now: int,
        error: BaseException | None = None,
        *,
        cut: bool = False,
    ) -> None:
        """End `interval` at `now`, its running descendants first (innermost first).

        `cut` marks the spans as cut short by shutdown (status ERROR), not ended by the code.
        """
        if interval.children:
            self._end_children(state, interval, now, cut=cut)
        self._end_one(state, interval, now, error, cut=cut)

    def _end_children(
        self, state: ThreadState, interval: Interval, now: int, *, cut: bool = False
    ) -> None:
        """End the running descendants of `interval`, innermost and latest first."""
        children = interval.children
        while children:
            last = children[-1]
            if last.children:  # deeper nesting: one walk, no recursion
                for descendant in reversed(descendants(last)):
                    self._end_one(state, descendant, now, None, cut=cut)
            self._end_one(state, last, now, None, cut=cut)

    def _end_one(
        self,
        state: ThreadState,
        interval: Interval,
        now: int,
        error: BaseException | None,
        *,
        cut: bool = False,
    ) -> None:
        """End `interval`, which has no running children, at `now`."""
        if _ranges.OPEN:
            _ranges.end(interval)
        duration = now - interval.seg_start
        node_state = interval.state
        if interval.device is None:
            count_ended(state, interval, now, duration, error)
        else:
            self.device.close(state, interval, error)
        parent = interval.parent
        if parent is None:
            discard(state.outermost, interval)
            if state.watched and self.slow is not None:
                self.slow.end(state, interval, now, cut)
        else:
            discard(parent.children, interval)
            parent.child_ns += duration
        discard(node_state.stack, interval)  # (see `slot_list`)
        span = interval.span
        if span is not None:
            if parent is None or (parent.implicit and parent.context is not None):
                # a traced lap, or the section a never-lapped timer's step is: with the memory
                self.spans.end_lap(span, now, error, cut=cut)
            else:
                self.spans.end(span, now, error, cut=cut)
        if parent is None and state.device is not None and state.device.pending:
            self.device.resolve(state, wait=False)

    def lap(self, state: ThreadState, interval: Interval, now: int) -> None:
        """End `interval` and start the next one of its timer at the same instant.

        When neither the ended nor the next interval is traced or held by a section entry,
        the object is reused in place: the result equals `end()` then `start()`.
        """
        node = interval.node
        parent = self.parent_for(state, node)
        if parent is None:
            _ranges.find_profiler()
        node_state = interval.state
        if interval.implicit:  # a section started it; a lap makes its laps the user's
            interval.implicit = False
            interval.context = None
            node_state.lapped = True
        in_place = (
            self.in_place
            and not interval.held
            and interval.span is None
            and interval.device is None
            and parent is interval.parent
            and _ranges.quiet()
        )
        reads = False  # whether something reads spans (asked for outermost laps only)
        if in_place:
            if parent is None:
                reads = self.tracer is not None and self.spans.spans_read()
                in_place = not reads or not self.spans.sampled(node, node_state.laps)
            else:
                in_place = self.spans.child_context(parent) is None
        if not in_place:
            self.end(state, interval, now)
            self.start(state, node, now, parent)
            return
        if interval.children:
            self._end_children(state, interval, now)
        duration = now - interval.seg_start
        count_ended(state, interval, now, duration, None)
        slow = self.slow
        if parent is None:
            if state.watched and slow is not None:
                slow.end(state, interval, now, False)
            interval.step = node_state.laps
            node_state.laps += 1
            if state.device is not None and state.device.pending:
                self.device.resolve(state, wait=False)
        else:
            parent.child_ns += duration
        interval.seg_start = interval.start = now
        interval.child_ns = 0
        if reads and slow is not None and parent is None:  # untraced: recorded
            slow.begin(state, interval, record=True)

    def switch_in_place(
        self, state: ThreadState, current: Interval, child: Timer, now: int
    ) -> bool:
        """Do `record(child)` in place when `current` runs exactly one untraced leaf section.

        The common step of a loop (`data` -> `forward` -> `backward`) ends that section and
        reuses its interval object for `child`, with no allocation and no list surgery; the
        result is the same as `end()` followed by `start()`. Returns False, changing nothing,
        when the general path is needed.
        """
        if not self.in_place or _ranges.OPEN or _ranges.active():  # (`_ranges.quiet()`)
            return False
        children = current.children
        if len(children) != 1 or current.span is not None or current.device is not None:
            return False
        sibling = children[0]
        if (
            sibling.children
            or sibling.held
            or sibling.span is not None  # (the traced section a never-lapped step is)
            or sibling.device is not None
            or child.device
        ):
            return False
        ended = sibling.state
        if sibling.node is child:
            target = ended
        else:
            found = child.mine  # (`find`, its common case inline)
            if found is None or found.owner is not state:
                found = find(state, child)
            if found is None or found.stack:
                return False
            target = found
        stack = ended.stack
        if stack[-1] is not sibling:
            return False
        start = sibling.start  # (`count_ended`, inline: the call per section of a loop)
        duration = now - sibling.seg_start
        state.count(ended.path, now - start, duration, sibling.child_ns, False)
        record = state.record
        if record is not None:
            record.append(sibling.node)
            record.append(start)
            record.append(now)
            record.append(None)
        current.child_ns += duration
        if target is not ended:  # (lapping the same section leaves its stack as it is)
            if len(stack) == 1:
                # The stacks trade their lists, [sibling] and []: a list that empties and
                # one that fills would each be reallocated.
                ended.stack, target.stack = target.stack, stack
            else:
                stack.pop()
                target.stack.append(sibling)
        sibling.node = child
        sibling.state = target
        sibling.seg_start = sibling.start = now
        sibling.child_ns = 0
        return True

    def leave(
        self,
        state: ThreadState,
        interval: Interval,
        now: int,
        error: BaseException | None,
        *,
        held: bool,
    ) -> None:
        """End a section entry's running `interval` at `now`, and the step it alone made.

        `held`: nothing else keeps the object (a `with` entry; a decorator keeps its token), so
        an untraced one stays its timer's spare (`NodeState.spare`) for the next entry. (A
        loop's `with` blocks end in place: `SectionEntry`.)
        """
        parent = interval.parent
        self.end(state, interval, now, error)
        if parent is not None and parent.implicit and not parent.children:
            self.end(state, parent, now)  # a step of a never-lapped timer
            reuse(parent)
        if held:
            reuse(interval)

    def run_owner_for(
        self, state: ThreadState, owner: Timer, child: Timer, now: int, entry: bool = False
    ) -> Interval:
        """Make `owner` run (starting it if needed) with no section but `child` running.

        Returns the owner's innermost running interval, the parent for `child`. A section
        `entry` that starts an outermost timer never lapped in this thread starts it for the
        section's duration only (`Interval.implicit`): each such section is a step.
        """
        mine = find(state, owner)
        if mine is not None and mine.stack:
            current = mine.stack[-1]
        else:
            parent = self.parent_for(state, owner)
            implicit = entry and parent is None and (mine is None or not mine.lapped)
            current = self.start(state, owner, now, parent, mine, implicit=implicit)
            if not entry:
                current.state.lapped = True
        if current.children:
            # Ending a sibling removes only that sibling from the list, behind this iterator.
            for sibling in reversed(current.children):
                if sibling.node is not child:
                    self.end(state, sibling, now)
        return current


def step_root(state: ThreadState, parent: Interval) -> dict[str, str | int] | None:
    """Return what the span of a section of `parent` carries as its step's root, else None.

    Sections share their lap's thread; the section a traced step of a never-lapped timer
    waits for (`Engine.start`) is that step's root span, and carries what its span would.
    """
    if parent.implicit and parent.context is not None:
        return {**state.thread, STEP_OF: parent.node.path}
    return None


def reuse(interval: Interval) -> None:
    """Keep an ended interval that nothing holds for its timer's next one, if untraced."""
    if interval.span is None and interval.device is None and not interval.node.device:
        interval.state.spare = interval


def count_ended(
    state: ThreadState, interval: Interval, now: int, duration: int, error: BaseException | None
) -> None:
    """Count a host interval that ended at `now`, its last segment `duration` long.

    An interval cut by a reset is counted here whole; its earlier part is in a total already.
    """
    start = interval.start
    state.count(interval.state.path, now - start, duration, interval.child_ns, error is not None)
    record = state.record
    if record is not None:  # a slow-lap record runs in this thread: one flat entry
        record.append(interval.node)
        record.append(start)
        record.append(now)
        record.append(error)
