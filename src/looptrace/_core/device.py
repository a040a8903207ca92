"""Device time: CUDA events at section boundaries, resolved lazily, never a sync per section.

A host timer around GPU work measures kernel launches, not the kernels. A device-timed
section records an event on the current stream where it starts and where it ends; durations
are read from the events later, at the end of the outermost lap when they have completed, and
at `reset()` (which waits for them). Spans of device sections are made then, with their
timestamps mapped onto the host epoch through an anchor event.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import trace
from opentelemetry.context import Context

from looptrace._base.attributes import DEVICE, STEP
from looptrace._core.spans import end_span

if TYPE_CHECKING:
    from looptrace._core.clock import Clock, EpochAnchor
    from looptrace._core.intervals import Interval, NodeState, ThreadState
    from looptrace._core.timer import Timer
    from looptrace._stats.health import Incidents

_log = logging.getLogger("looptrace")

Event = Any  # an opaque handle a DeviceClock hands out


class DeviceClock(Protocol):
    """Events on the device's current stream; `looptrace.testing.FakeDeviceClock` fakes it."""

    def record(self) -> Event:
        """Record an event on the current stream and return it (no waiting)."""
        ...

    def query(self, event: Event) -> bool:
        """Return whether the device has reached `event`."""
        ...

    def synchronize(self, event: Event) -> None:
        """Wait until the device has reached `event`."""
        ...

    def elapsed_ns(self, start: Event, end: Event) -> int:
        """Return the device time between two completed events, in nanoseconds."""
        ...

    def release(self, event: Event) -> None:
        """Give an event back for reuse once it is no longer read."""
        ...

    def synchronize_all(self) -> None:
        """Wait for all queued device work (the synchronize mode)."""
        ...


class CudaEventClock:
    """`torch.cuda.Event(enable_timing=True)` objects, pooled so memory stays flat."""

    def __init__(self, max_free: int = 4096) -> None:
        # The [torch] extra, imported only when a device timer starts.
        torch = importlib.import_module("torch")
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available")
        self._torch = torch
        self._free: list[Any] = []
        self._max_free = max_free

    def record(self) -> Event:
        """Record a pooled timing event on the current stream."""
        event = self._free.pop() if self._free else self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def query(self, event: Event) -> bool:
        """Return whether the event has completed, without waiting."""
        return bool(event.query())

    def synchronize(self, event: Event) -> None:
        """Wait for the event."""
        event.synchronize()

    def elapsed_ns(self, start: Event, end: Event) -> int:
        """Return the time between two completed events (CUDA reports ms, 0.5 µs resolution)."""
        return round(float(start.elapsed_time(end)) * 1e6)

    def release(self, event: Event) -> None:
        """Keep the event for reuse, up to the pool size."""
        if len(self._free) < self._max_free:
            self._free.append(event)

    def synchronize_all(self) -> None:
        """Wait for the whole device."""
        self._torch.cuda.synchronize()


class SyncedClock:
    """A host clock that waits for the device before every reading: host-aligned numbers."""

    __slots__ = ("_clock", "_device")

    def __init__(self, clock: Clock, device: DeviceClock) -> None:
        self._clock = clock
        self._device = device

    def monotonic_ns(self) -> int:
        """Wait for all queued device work, then read the host clock."""
        self._device.synchronize_all()
        return self._clock.monotonic_ns()

    def time_ns(self) -> int:
        """Read the wall clock (for the epoch anchor only)."""
        return self._clock.time_ns()


class Segment:
    """The device part of one interval between two events, up to its end or a reset cut.

    `parent` is the segment of the enclosing device interval that was open when this one
    closed, so its self time can exclude this one's device time.
    """

    __slots__ = (
        "before_ns",
        "child_ns",
        "end",
        "error",
        "next",
        "node_state",
        "owns_start",
        "parent",
        "span",
        "start",
    )

    def __init__(self, node_state: NodeState, start: Event, *, owns_start: bool) -> None:
        self.node_state = node_state
        self.start = start
        self.owns_start = owns_start  # False: the start event is a span's, kept until it is made
        self.end: Event = None
        self.parent: Segment | None = None
        self.child_ns = 0
        self.error = False
        self.span: SpanRequest | None = None
        self.next: Segment | None = None  # the rest of the interval after a reset cut
        self.before_ns = 0  # device time of the interval's segments before this one


class SpanRequest:
    """What a traced device interval needs to become a span once its events are read."""

    __slots__ = ("attributes", "context", "error", "first", "name")

    def __init__(self, name: str, context: Any, attributes: dict[str, Any], first: Event) -> None:
        self.name = name
        self.context = context
        self.attributes = attributes
        self.first = first
        self.error: BaseException | None = None


class DeviceTrack:
    """The device side of one running interval."""

    __slots__ = ("segment", "span")

    def __init__(self, segment: Segment, span: SpanRequest | None) -> None:
        self.segment = segment
        self.span = span


class DeviceQueue:
    """One thread's closed segments waiting for their events, in the order they closed."""

    __slots__ = ("anchor", "pending")

    def __init__(self) -> None:
        self.pending: list[Segment] = []
        self.anchor: tuple[int, Event] | None = None  # (host epoch ns, event) for timestamps


def open_segment(clock: DeviceClock, interval: Interval, span: SpanRequest | None) -> DeviceTrack:
    """Start the device side of `interval`: one event now (the span's first, when traced)."""
    start = clock.record() if span is None else span.first
    return DeviceTrack(Segment(interval.state, start, owns_start=span is None), span)


def close_segment(
    clock: DeviceClock, queue: DeviceQueue, interval: Interval, *, reopen: bool
) -> None:
    """Close the open segment of `interval` with an event; with `reopen`, continue in a new one.

    A reset cut reopens: the part before the cut goes into the closing window's total, and
    the interval is counted whole in the window it ends in, exactly as for host time.
    """
    track = interval.device
    assert track is not None
    segment = track.segment
    segment.end = clock.record()
    parent = interval.parent
    while parent is not None and parent.device is None:
        parent = parent.parent
    segment.parent = parent.device.segment if parent is not None and parent.device else None
    queue.pending.append(segment)
    if reopen:
        track.segment = segment.next = Segment(segment.node_state, clock.record(), owns_start=True)
    else:
        segment.span = track.span


def resolve(clock: DeviceClock, queue: DeviceQueue, *, wait: bool, make_span: Any) -> bool:
    """Fold completed segments into their timers' measurements; return whether all were.

    Without `wait` nothing blocks: if the last closed segment is not done yet, everything
    waits for a later call. With `wait`, the device is waited for (reset, shutdown).
    """
    pending = queue.pending
    if not pending:
        return True
    last = pending[-1].end
    if wait:
        clock.synchronize(last)
    elif not clock.query(last):
        return False
    for segment in pending:
        duration = clock.elapsed_ns(segment.start, segment.end)
        node_state = segment.node_state
        thread = node_state.owner  # the state whose queue this is: claimed, or its owner's
        if segment.next is not None:  # cut by a reset: window time, counted when it ends
            thread.count_cut(node_state.path, duration, segment.child_ns)
            segment.next.before_ns = segment.before_ns + duration
        else:
            whole = segment.before_ns + duration
            thread.count(node_state.path, whole, duration, segment.child_ns, segment.error)
        if segment.parent is not None:
            segment.parent.child_ns += duration
    for segment in pending:  # spans after all durations: a span may map any event
        if segment.span is not None:
            make_span(segment)
            clock.release(segment.span.first)
    queue.pending = []
    for segment in pending:
        if segment.owns_start:
            clock.release(segment.start)
        clock.release(segment.end)
    return True


class DeviceTiming:
    """The device side of an engine: its clock, and each thread's queue of segments."""

    def __init__(
        self,
        clock: DeviceClock | None,
        tracer: trace.Tracer | None,
        anchor: EpochAnchor,
        incidents: Incidents,
        span_base: Callable[[Timer], dict[str, str | int]],
    ) -> None:
        self.clock = clock
        self._failed = False
        self._tracer = tracer
        self._anchor = anchor
        self._incidents = incidents
        self._span_base = span_base

    def disable(self) -> None:
        """Time device timers on the host clock (the synchronize mode)."""
        self.clock = None
        self._failed = True

    def available(self) -> bool:
        """Return whether device timers can use events, making the CUDA clock on first use."""
        if self.clock is None and not self._failed:
            try:
                self.clock = CudaEventClock()
            except Exception as error:  # no torch, no CUDA: host time, said once
                self._failed = True
                self._incidents.misused(
                    "device", f"device timers use host time: no CUDA device ({error})"
                )
        return self.clock is not None

    def open(
        self, state: ThreadState, interval: Interval, context: Context | None, now: int
    ) -> None:
        """Start the device side of `interval`; `context` is its span parent when traced."""
        clock = self.clock
        assert clock is not None
        queue = state.device
        if queue is None:
            queue = state.device = DeviceQueue()
        request = None
        if context is not None:
            if queue.anchor is None:
                queue.anchor = (self._anchor.epoch_ns(now), clock.record())
            attributes = {**self._span_base(interval.node), STEP: interval.step, DEVICE: True}
            if interval.parent is None:
                attributes.update(state.thread)  # as on host laps
            request = SpanRequest(interval.node.name, context, attributes, clock.record())
        interval.device = open_segment(clock, interval, request)

    def close(self, state: ThreadState, interval: Interval, error: BaseException | None) -> None:
        """End the device side of `interval` with an event."""
        assert self.clock is not None and state.device is not None
        track = interval.device
        assert track is not None
        track.segment.error = error is not None
        if track.span is not None:
            track.span.error = error
        close_segment(self.clock, state.device, interval, reopen=False)

    def cut(self, state: ThreadState, interval: Interval) -> None:
        """Split a running device interval at a reset."""
        assert self.clock is not None and state.device is not None
        close_segment(self.clock, state.device, interval, reopen=True)

    def resolve(self, state: ThreadState, *, wait: bool) -> None:
        """Fold the thread's completed segments; `wait` blocks until all are done."""
        queue, clock = state.device, self.clock
        if queue is None or clock is None:
            return
        try:
            resolve(clock, queue, wait=wait, make_span=lambda seg: self._span(queue, seg))
        except Exception:
            queue.pending = []
            self._incidents.failed("device time")

    def _span(self, queue: DeviceQueue, segment: Segment) -> None:
        """Make the span of a finished device interval, timestamps mapped via the anchor."""
        request, clock = segment.span, self.clock
        assert request is not None and clock is not None and queue.anchor is not None
        if self._tracer is None:
            return
        epoch, anchor = queue.anchor
        span = self._tracer.start_span(
            request.name,
            context=request.context,
            attributes=request.attributes,
            start_time=epoch + clock.elapsed_ns(anchor, request.first),
        )
        end_ns = epoch + clock.elapsed_ns(anchor, segment.end)
        end_span(span, end_ns, request.error, self._incidents)
