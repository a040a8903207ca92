"""Running intervals per thread: starting, ending, nesting, and cutting them at `reset()`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context

from looptrace._core import ranges as _ranges
from looptrace._core.clock import Clock, EpochAnchor
from looptrace._core.device import DeviceClock, DeviceTiming
from looptrace._core.ids import StepTraces
from looptrace._core.intervals import Interval, ThreadState
from looptrace._core.sampling import LapSampler
from looptrace._core.slow_laps import SlowLaps
from looptrace._core.spans import end_span
from looptrace._core.states import States
from looptrace._stats.aggregator import Aggregator
from looptrace._stats.attributes import PATH, STEP
from looptrace._stats.health import Incidents

if TYPE_CHECKING:
    from looptrace._core.timer import Timer
    from looptrace._stats.snapshot import Snapshot


class Engine:
    """Shared machinery of one `Looptrace`: clock, tracing, and every thread's timers.

    Lock order: the aggregator's lock before any thread state's lock.
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
        self.span_attributes = span_attributes
        self.incidents = incidents
        # Whether anything besides looptrace's own processor reads spans; asked once per lap.
        self.spans_read: Callable[[], bool] = lambda: True
        self.closed = False
        # Closes the window of one timer's subtree; set by the `Looptrace` that owns this.
        self.reset_timer: Callable[[Timer, bool], Snapshot] | None = None
        self._attributes: dict[Timer, dict[str, str | int]] = {}
        self.states = States(self.now)
        self.states.on_new = self._close_exited_if_free
        self.local = self.states.local
        self.state = self.states.state
        self.thread_state = self.states.thread_state
        self.task_state = self.states.task_state
        self.device = DeviceTiming(device_clock, tracer, self.anchor, incidents, self._span_base)
        # Traces untraced laps much slower than their timer's recent median (None: off).
        self.slow: SlowLaps | None = None
        if tracer is not None and slow_lap_factor is not None:
            self.slow = SlowLaps(
                slow_lap_factor,
                tracer,
                anchor=self.anchor,
                span_base=self._span_base,
                step_traces=step_traces,
                incidents=incidents,
            )

    # -- thread states -------------------------------------------------------------------

    def _close_exited_if_free(self) -> None:
        lock = self.aggregator.lock
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
        mine: ThreadState | None = getattr(self.local, "state", None)
        # Without a state of its own (a signal's helper thread): the most laps of any thread.
        states = [mine] if mine is not None else self.states.all()
        done = [
            node.laps - any(interval.node is timer for interval in state.outermost)
            for state in states
            for timer, node in list(state.nodes.items())
            if node.laps and _within(timer.path, subtree)
        ]
        return max(done, default=None)

    def merge_pending(self, state: ThreadState) -> None:
        """Merge a thread's pending measurements into the window (bounds memory)."""
        aggregator = self.aggregator
        with aggregator.lock:
            with state.lock:
                batches = state.detach_all()
                SlowLaps.bound(state)
            for batch in batches:
                aggregator.merge(*batch)

    def close_window(self, now: int, *, final: bool = False, subtree: str | None = None) -> None:
        """Cut every running interval and merge everything measured before the cut.

        Each thread is cut at one instant, read while its lock is held: a thread that lapped
        after `reset()` read `now` has that lap in this window and nothing before its cut in
        the next, so no time is counted twice or lost. The caller holds the aggregator's
        lock, so no measurement after a cut can reach this window. A `final` window (shutdown)
        ends every running interval instead, its span marked as cut. With `subtree` (a timer's
        path) only the intervals of that timer and its descendants are cut.
        """
        self.close_exited()
        states = self.states.all()
        aggregator = self.aggregator
        for state in states:
            with state.lock:
                cut_at = max(now, self.now())
                state.last_cut = cut_at
                if final:
                    for top in reversed(state.outermost):
                        self.end(state, top, cut_at, cut=True)
                elif subtree is None:
                    for top in state.outermost:
                        self.cut(state, top, cut_at)
                else:
                    self._cut_subtree(state, subtree, cut_at)
                batches = self._drain(state)
            for batch in batches:
                aggregator.merge(*batch)

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
        aggregator = self.aggregator
        exited = self.states.exited
        while exited:
            state, at = exited.popleft()
            if not self.states.retire(state):
                continue
            with state.lock:
                at = max(at, state.last_cut)
                for top in reversed(state.outermost):
                    self.end(state, top, at)
                batches = self._drain(state)
            for batch in batches:
                aggregator.merge(*batch)

    def _drain(self, state: ThreadState) -> list[tuple[str, list[int], int, int, int]]:
        """Wait for the thread's device events and hand over all it measured; holds its lock."""
        if state.device is not None:
            self.device.resolve(state, wait=True)
        return state.detach_all()

    def after_fork_in_child(self) -> None:
        """Keep only the forking thread's state, with fresh locks and nothing counted yet."""
        state = self.states.after_fork_in_child()
        if state is None:
            return
        state.renew_lock()
        state.detach_all()
        now = self.now()
        pending = list(state.outermost)
        while pending:
            interval = pending.pop()
            interval.seg_start = interval.start = now
            interval.child_ns = 0
            interval.span = interval.context = None
            interval.device = None  # a forked child cannot use its parent's device context
            pending.extend(interval.children)
        state.device = None
        state.watched, state.recording, state.record = [], [], None

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

    def start(self, state: ThreadState, node: Timer, now: int, parent: Interval | None) -> Interval:
        """Start an interval of `node` at `now`, nested in `parent` (None: a new outermost lap)."""
        node_state = state.nodes.get(node) or state.node(node)
        if parent is None:
            _ranges.find_profiler()
            step = node_state.laps
            node_state.laps = step + 1
            context = self._lap_context(node, step)
        else:
            step = parent.step
            no_trace = parent.span is None and parent.device is None
            context = None if no_trace else self._child_context(parent)
        if node.device and self.device.available():
            interval = Interval(node, node_state, parent, now, step, None)
            self.device.open(state, interval, context, now)
        else:
            thread = state.thread if parent is None else None  # sections share their lap's
            span = None if context is None else self._start_span(node, context, now, step, thread)
            interval = Interval(node, node_state, parent, now, step, span)
        if parent is None:
            if context is not None and self.step_traces is not None:
                self.step_traces.done()  # a device lap's span comes later, without pinned ids
            state.outermost.append(interval)
            slow = self.slow
            if (
                slow is not None
                and interval.device is None
                and (context is not None or self.spans_read())
            ):
                slow.begin(state, interval, record=context is None)
        else:
            parent.children.append(interval)
        node_state.stack.append(interval)
        if _ranges.active():
            _ranges.begin(interval)
        return interval

    def _lap_context(self, node: Timer, step: int) -> Context | None:
        """Return the parent context of a traced outermost lap, None when it is not traced."""
        if not self.traced(step):
            return None
        if self.step_traces is None:
            return Context()
        return self.step_traces.context_for(node.path, step)

    def traced(self, step: int) -> bool:
        """Whether outermost lap `step` gets spans: sampled, and something reads them."""
        return self.tracer is not None and self.sampler(step) and self.spans_read()

    def _child_context(self, parent: Interval) -> Context | None:
        """Return the parent context of a section of a traced interval, else None."""
        if parent.span is not None:
            context = parent.context
            if context is None:
                context = parent.context = trace.set_span_in_context(parent.span, Context())
            return context
        if parent.device is not None and parent.device.span is not None:
            return self._host_context(parent)
        return None

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
                for descendant in reversed(_descendants(last)):
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
        if _ranges.any_open():
            _ranges.end(interval)
        duration = now - interval.seg_start
        node_state = interval.state
        if interval.device is None:
            _count_ended(state, interval, now, duration, error)
        else:
            self.device.close(state, interval, error)
        parent = interval.parent
        if parent is None:
            state.outermost.remove(interval)
            if state.watched and self.slow is not None:
                self.slow.end(state, interval, now, cut)
        else:
            parent.children.remove(interval)
            parent.child_ns += duration
        stack = node_state.stack
        if stack[-1] is interval:
            stack.pop()
        else:
            stack.remove(interval)
        if interval.span is not None:
            self._end_span(interval.span, now, error, cut=cut)
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
            node_state.lapped = True
        in_place = (
            not interval.held
            and interval.span is None
            and interval.device is None
            and parent is interval.parent
            and _ranges.quiet()
        )
        reads = False  # whether something reads spans (asked for outermost laps only)
        if in_place:
            if parent is None:
                reads = self.tracer is not None and self.spans_read()
                in_place = not reads or not self.sampler(node_state.laps)
            else:
                in_place = self._child_context(parent) is None
        if not in_place:
            self.end(state, interval, now)
            self.start(state, node, now, parent)
            return
        if interval.children:
            self._end_children(state, interval, now)
        duration = now - interval.seg_start
        _count_ended(state, interval, now, duration, None)
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
        if not _ranges.quiet():
            return False
        children = current.children
        if len(children) != 1 or current.span is not None or current.device is not None:
            return False
        sibling = children[0]
        if sibling.children or sibling.held or sibling.device is not None or child.device:
            return False
        ended = sibling.state
        if sibling.node is child:
            target = ended
        else:
            found = state.nodes.get(child)
            if found is None or found.stack:
                return False
            target = found
        stack = ended.stack
        if stack[-1] is not sibling:
            return False
        duration = now - sibling.seg_start
        _count_ended(state, sibling, now, duration, None)
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

    def run_owner_for(
        self, state: ThreadState, owner: Timer, child: Timer, now: int, entry: bool = False
    ) -> Interval:
        """Make `owner` run (starting it if needed) with no section but `child` running.

        Returns the owner's innermost running interval, the parent for `child`. A section
        `entry` that starts an outermost timer never lapped in this thread starts it for the
        section's duration only (`Interval.implicit`): each such section is a step.
        """
        mine = state.nodes.get(owner)
        if mine is not None and mine.stack:
            current = mine.stack[-1]
        else:
            parent = self.parent_for(state, owner)
            current = self.start(state, owner, now, parent)
            if not entry:
                current.state.lapped = True
            elif parent is None and not current.state.lapped:
                current.implicit = True
        # Ending a sibling removes only that sibling from the list, behind this iterator.
        for sibling in reversed(current.children):
            if sibling.node is not child:
                self.end(state, sibling, now)
        return current

    def cut(self, state: ThreadState, interval: Interval, now: int) -> None:
        """Count the part of a running interval before `now`; the rest goes to the next window."""
        if interval.children:
            for descendant in reversed(_descendants(interval)):
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
                node_state = interval.state
                node_state.carry_ns += duration
                node_state.self_ns += duration - interval.child_ns
            else:
                self.device.cut(state, interval)
            if interval.parent is not None:
                interval.parent.child_ns += duration
        interval.seg_start = now
        interval.child_ns = 0

    def _host_context(self, interval: Interval) -> Context:
        """Return the span context of the nearest host-traced ancestor (device spans wait)."""
        found: Interval | None = interval
        while found is not None and found.span is None:
            found = found.parent
        if found is None or found.span is None:
            return Context()
        if found.context is None:
            found.context = trace.set_span_in_context(found.span, Context())
        return found.context

    # -- spans ---------------------------------------------------------------------------

    def _start_span(
        self,
        node: Timer,
        context: Context,
        now: int,
        step: int,
        thread: dict[str, str | int] | None = None,
    ) -> trace.Span | None:
        assert self.tracer is not None
        attributes = {**self._span_base(node), STEP: step}
        if thread is not None:
            attributes.update(thread)
        try:
            return self.tracer.start_span(
                node.name,
                context=context,
                attributes=attributes,
                start_time=self.anchor.epoch_ns(now),
                record_exception=False,
                set_status_on_exception=False,
            )
        except Exception:  # a failing processor must not break the loop: time it untraced
            self.incidents.failed("span start")
            return None

    def _span_base(self, node: Timer) -> dict[str, str | int]:
        base = self._attributes.get(node)
        if base is None:
            base = self._attributes[node] = {PATH: node.path, **self.span_attributes}
        return base

    def _end_span(
        self, span: trace.Span, now: int, error: BaseException | None, *, cut: bool = False
    ) -> None:
        end_span(span, self.anchor.epoch_ns(now), error, self.incidents, cut=cut)


def _count_ended(
    state: ThreadState, interval: Interval, now: int, duration: int, error: BaseException | None
) -> None:
    """Count a host interval that ended at `now`, its last segment `duration` long.

    An interval cut by a reset is counted here whole; its earlier part is in a total already.
    """
    start = interval.start
    earlier = interval.seg_start - start
    if interval.state.count(now - start, duration, interval.child_ns, earlier, error is not None):
        state.fold_due = True
    record = state.record
    if record is not None:  # a slow-lap record runs in this thread
        record.append((interval.node, start, now, error))


def _within(path: str, subtree: str | None) -> bool:
    """Whether `path` is the timer at path `subtree` or one of its descendants (None: all)."""
    return subtree is None or path == subtree or path.startswith(f"{subtree}.")


def _descendants(interval: Interval) -> list[Interval]:
    """Return the running descendants of `interval` in pre-order, children in start order.

    Reversed, the list has every interval after its descendants and later siblings first:
    the order in which they end. A loop, not recursion: nesting is as deep as the user's.
    """
    found: list[Interval] = []
    pending = list(reversed(interval.children))
    while pending:
        current = pending.pop()
        found.append(current)
        if current.children:
            pending.extend(reversed(current.children))
    return found
