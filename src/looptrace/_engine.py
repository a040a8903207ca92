"""Running intervals per thread: starting, ending, nesting, and cutting them at `reset()`."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Status, StatusCode

from looptrace._aggregator import Aggregator, Entry
from looptrace._clock import Clock, EpochAnchor
from looptrace._health import Incidents

if TYPE_CHECKING:
    from looptrace._timer import Timer

PATH = "looptrace.path"
STEP = "looptrace.step"
THREAD_ID = "thread.id"
THREAD_NAME = "thread.name"


class Interval:
    """One running measurement of a timer in one thread.

    `seg_start` and `seg_child` describe the part inside the current reset window: `reset()`
    moves `seg_start` to the cut and zeroes `seg_child`, the children's time in that part.
    """

    __slots__ = ("children", "node", "parent", "seg_child", "seg_start", "span", "step")

    def __init__(
        self, node: Timer, parent: Interval | None, now: int, step: int, span: trace.Span | None
    ) -> None:
        self.node = node
        self.parent = parent
        self.children: list[Interval] = []
        self.seg_start = now
        self.seg_child = 0
        self.step = step
        self.span = span


class ThreadState:
    """The running intervals of one thread; its lock is only contended by `reset()`."""

    __slots__ = ("buffer", "laps", "lock", "stacks", "thread", "tops")

    def __init__(self, buffer: list[Entry]) -> None:
        self.lock = threading.Lock()
        self.buffer = buffer
        self.stacks: dict[Timer, list[Interval]] = {}
        self.tops: list[Interval] = []
        self.laps: dict[Timer, int] = {}
        # Made in the thread it describes; spans carry it so viewers can lay threads apart.
        self.thread: dict[str, str | int] = {
            THREAD_ID: threading.get_ident(),
            THREAD_NAME: threading.current_thread().name,
        }


class _Holder:
    """Lives in the thread-local slot; when the thread exits it dies and closes the state."""

    __slots__ = ("__weakref__", "state")

    def __init__(self, state: ThreadState) -> None:
        self.state = state


class Engine:
    """Shared machinery of one `Looptrace`: clock, aggregation, tracing and thread states."""

    def __init__(
        self,
        *,
        clock: Clock,
        aggregator: Aggregator,
        tracer: trace.Tracer | None,
        trace_every: int,
        span_attributes: dict[str, int],
        incidents: Incidents,
    ) -> None:
        self.now = clock.monotonic_ns
        self.anchor = EpochAnchor(clock)
        self.aggregator = aggregator
        self.tracer = tracer
        self.trace_every = trace_every
        self.span_attributes = span_attributes
        self.incidents = incidents
        self.closed = False
        self._local = threading.local()
        self._states: dict[int, ThreadState] = {}
        self._states_lock = threading.Lock()

    # -- thread states -------------------------------------------------------------------

    def state(self) -> ThreadState:
        """Return the calling thread's state, creating it on first use."""
        try:
            return self._local.holder.state  # type: ignore[no-any-return]
        except AttributeError:
            pass
        state = ThreadState(self.aggregator.new_buffer())
        holder = _Holder(state)
        finalizer = weakref.finalize(holder, self._thread_exited, state)
        finalizer.atexit = False
        with self._states_lock:
            self._states[id(state)] = state
        self._local.holder = holder
        return state

    def states(self) -> list[ThreadState]:
        """Return every live thread's state."""
        with self._states_lock:
            return list(self._states.values())

    def steps_done(self) -> int | None:
        """Return how many outermost laps the calling thread has completed (None: no laps).

        With several outermost timers, the largest count. It is the step a `reset()` window
        closes at: the spans of that window have `looptrace.step` below it.
        """
        holder = getattr(self._local, "holder", None)
        if holder is None or not holder.state.laps:
            return None
        state: ThreadState = holder.state
        running = {interval.node for interval in state.tops}
        return max(n - (timer in running) for timer, n in state.laps.items())

    def _thread_exited(self, state: ThreadState) -> None:
        """Close what a finished thread left running, so it is not carried into later windows."""
        with state.lock:
            now = self.now()
            for top in reversed(state.tops):
                self.end(state, top, now)
        with self._states_lock:
            self._states.pop(id(state), None)
        self.aggregator.release_buffer(state.buffer)

    def after_fork_in_child(self) -> None:
        """Keep only the forking thread's state, with fresh locks and nothing counted yet."""
        current = getattr(self._local, "holder", None)
        self._states_lock = threading.Lock()
        self._states = {}
        if current is None:
            return
        state: ThreadState = current.state
        state.lock = threading.Lock()
        self._states[id(state)] = state
        now = self.now()
        pending = list(state.tops)
        while pending:
            interval = pending.pop()
            interval.seg_start, interval.seg_child, interval.span = now, 0, None
            pending.extend(interval.children)

    # -- intervals -----------------------------------------------------------------------

    def parent_for(self, state: ThreadState, node: Timer) -> Interval | None:
        """Return the innermost running interval of the nearest running ancestor of `node`."""
        ancestor = node.parent
        while ancestor is not None:
            stack = state.stacks.get(ancestor)
            if stack:
                return stack[-1]
            ancestor = ancestor.parent
        return None

    def start(self, state: ThreadState, node: Timer, now: int, parent: Interval | None) -> Interval:
        """Start an interval of `node` at `now`, nested in `parent` (None: a new outermost lap)."""
        span: trace.Span | None = None
        if parent is None:
            step = state.laps.get(node, 0)
            state.laps[node] = step + 1
            if self.tracer is not None and self.trace_every and step % self.trace_every == 0:
                span = self._start_span(state, node, Context(), now, step)
        else:
            step = parent.step
            if parent.span is not None:
                span = self._start_span(
                    state, node, trace.set_span_in_context(parent.span, Context()), now, step
                )
        interval = Interval(node, parent, now, step, span)
        if parent is None:
            state.tops.append(interval)
        else:
            parent.children.append(interval)
        stack = state.stacks.get(node)
        if stack is None:
            state.stacks[node] = [interval]
        else:
            stack.append(interval)
        return interval

    def end(
        self, state: ThreadState, interval: Interval, now: int, error: BaseException | None = None
    ) -> None:
        """End `interval` at `now`, its running descendants first (innermost first)."""
        children = interval.children
        while children:
            self.end(state, children[-1], now)
        duration = now - interval.seg_start
        node = interval.node
        state.buffer.append((node.path, duration, duration - interval.seg_child, error is not None))
        parent = interval.parent
        if parent is None:
            state.tops.remove(interval)
        else:
            parent.children.remove(interval)
            parent.seg_child += duration
        stack = state.stacks[node]
        if stack[-1] is interval:
            stack.pop()
        else:
            stack.remove(interval)
        span = interval.span
        if span is not None:
            self._end_span(span, now, error)

    def close_siblings(self, state: ThreadState, mine: Interval, keep: Timer, now: int) -> None:
        """End the running children of `mine` other than those of timer `keep`."""
        # Ending a sibling removes only that sibling from the list, behind this iterator.
        for sibling in reversed(mine.children):
            if sibling.node is not keep:
                self.end(state, sibling, now)

    def cut(self, state: ThreadState, interval: Interval, now: int) -> None:
        """Count the part of a running interval before `now`; the rest goes to the next window."""
        for child in interval.children:
            self.cut(state, child, now)
        duration = now - interval.seg_start
        if duration > 0:
            state.buffer.append(
                (interval.node.path, duration, duration - interval.seg_child, False)
            )
            if interval.parent is not None:
                interval.parent.seg_child += duration
        interval.seg_start = now
        interval.seg_child = 0

    # -- spans ---------------------------------------------------------------------------

    def _start_span(
        self, state: ThreadState, node: Timer, context: Context, now: int, step: int
    ) -> trace.Span:
        assert self.tracer is not None
        attributes: dict[str, str | int] = {
            PATH: node.path,
            STEP: step,
            **self.span_attributes,
            **state.thread,
        }
        return self.tracer.start_span(
            node.name,
            context=context,
            attributes=attributes,
            start_time=self.anchor.epoch_ns(now),
            record_exception=False,
            set_status_on_exception=False,
        )

    def _end_span(self, span: trace.Span, now: int, error: BaseException | None) -> None:
        end_ns = self.anchor.epoch_ns(now)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.record_exception(error, timestamp=end_ns)
        span.end(end_time=end_ns)
