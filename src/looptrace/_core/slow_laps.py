"""Slow laps are traced whatever the sampling: a compact record per lap, exported when slow.

While an untraced outermost lap runs and something reads spans, every interval that ends in
its thread is kept as four items `timer, start_ns, end_ns, error` of a flat list on the
thread's state: no span object, no context, not even a tuple for the garbage collector. When
the lap ends its duration is compared with the median of that timer's recent laps in this
thread; a lap more than `factor` times the median is exported in full (the lap span and every
section span, real timestamps, nesting rebuilt from timer ancestry and time containment, under
the step's trace id), within a rate cap. Otherwise the record is dropped. With nothing reading
spans no lap is watched and nothing is recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, cast

from opentelemetry import trace
from opentelemetry.context import Context

from looptrace._core.clock import EpochAnchor
from looptrace._core.ids import StepTraces
from looptrace._core.intervals import discard
from looptrace._core.spans import end_span
from looptrace._stats.attributes import SLOW_LAP, STEP, THREAD_ID
from looptrace._stats.health import Incidents

if TYPE_CHECKING:
    from looptrace._core.intervals import Interval, ThreadState
    from looptrace._core.timer import Timer

# One interval that ended while a lap was recorded: timer, start and end (monotonic ns), and
# the exception it ended with.
Entry = tuple["Timer", int, int, BaseException | None]
ENTRY_ITEMS: Final = 4  # items of one entry in a thread's flat record

DEFAULT_FACTOR: Final = 3.0
MIN_LAPS: Final = 10  # laps of a timer seen before any is judged slow
RING: Final = 32  # recent lap durations kept per timer and thread
MEDIAN_EVERY: Final = 16  # laps between two recomputations of the median
RATE: Final = 20  # at most one slow lap in RATE exported, on average
BURST: Final = 3  # slow laps exported back to back at most, after a quiet stretch
# A lap is slow only if it also takes this much longer than the median: a 30 µs step that
# took 100 µs is scheduling noise, not a straggler worth a trace.
MIN_EXCESS_NS: Final = 1_000_000
# Entries a thread's record may hold, checked when the thread merges its measurements: a lap
# with more sections than this would flood a backend as a trace, and must not grow memory.
MAX_RECORD: Final = 65_536


class LapTimes:
    """Recent lap durations of one outermost timer in one thread, and its export credit.

    The credit counts in 1/RATE of a lap: it grows by one per lap, up to BURST * RATE, and an
    exported slow lap spends RATE of it (a token bucket).
    """

    def __init__(self) -> None:
        self.ring: list[int] = []
        self.next = 0  # where the next duration goes once the ring is full
        self.median = 0
        self.since = 0  # laps added since the median was computed
        self.credit = RATE

    def ratio(self, duration: int, factor: float) -> float:
        """Return `duration` over the recent median if slow (see `MIN_EXCESS_NS`), else 0."""
        median = self.median
        if (
            len(self.ring) < MIN_LAPS
            or median <= 0
            or duration <= factor * median
            or duration - median < MIN_EXCESS_NS
        ):
            return 0.0
        return duration / median

    def add(self, duration: int) -> None:
        """Keep a finished lap's duration; refresh the median every few laps."""
        ring = self.ring
        if len(ring) < RING:
            ring.append(duration)
        else:
            ring[self.next] = duration
            self.next = (self.next + 1) % RING
        self.since += 1
        if self.since >= MEDIAN_EVERY or len(ring) == MIN_LAPS:
            self.median = sorted(ring)[len(ring) // 2]
            self.since = 0
        if self.credit < BURST * RATE:
            self.credit += 1

    def spend(self) -> bool:
        """Take one export from the credit; False (nothing taken) when there is not enough."""
        if self.credit < RATE:
            return False
        self.credit -= RATE
        return True


class SlowLaps:
    """Decides which laps are recorded, judges them when they end, and exports the slow ones."""

    def __init__(
        self,
        factor: float,
        tracer: trace.Tracer,
        *,
        anchor: EpochAnchor,
        span_base: Callable[[Timer], dict[str, str | int]],
        step_traces: StepTraces | None,
        incidents: Incidents,
    ) -> None:
        self.factor = factor
        self.tracer = tracer
        self.anchor = anchor
        self.span_base = span_base
        self.step_traces = step_traces
        self.incidents = incidents

    def begin(self, state: ThreadState, lap: Interval, record: bool) -> None:
        """Watch an outermost lap that just started; `record` its intervals if it is untraced."""
        state.watched.append(lap)
        if record:
            state.recording.append(lap)
            if state.record is None:
                state.record = []

    @staticmethod
    def bound(state: ThreadState) -> None:
        """Stop recording a thread whose record outgrew `MAX_RECORD`; its laps stay untraced."""
        record = state.record
        if record is not None and len(record) > MAX_RECORD * ENTRY_ITEMS:
            state.recording.clear()
            state.record = None

    def end(self, state: ThreadState, lap: Interval, now: int, cut: bool) -> None:
        """Judge a watched lap that ended at `now` (its own entry recorded last) and forget it.

        A lap `cut` by shutdown is neither judged nor kept in the recent durations.
        """
        watched = state.watched
        if lap not in watched:
            return
        discard(watched, lap)
        recording = state.recording
        recorded = lap in recording
        if recorded:
            discard(recording, lap)
        if not cut:
            times = lap.state.lap_times
            if times is None:
                times = lap.state.lap_times = LapTimes()
            duration = now - lap.start
            ratio = times.ratio(duration, self.factor) if recorded else 0.0
            times.add(duration)
            if ratio > 0.0 and state.record is not None:
                if times.spend():
                    self.export(state, lap, now, ratio, state.record)
                else:
                    self.incidents.slow_lap_suppressed()
        if not recording:  # else its entries go when the thread's last recorded lap ends
            state.record = None

    def export(
        self, state: ThreadState, lap: Interval, now: int, ratio: float, record: list[object]
    ) -> None:
        """Export the lap and the intervals of its subtree recorded while it ran, as spans."""
        try:
            entries = _subtree(entries_of(record), lap)
            if not entries or entries[-1][0] is not lap.node:
                entries.append((lap.node, lap.start, now, None))
            children = nest(entries)
            root = len(entries) - 1
            spans: list[trace.Span | None] = [None] * len(entries)
            spans[root] = self._lap_span(state, lap, ratio)
            pending = [root]
            while pending:
                parent = pending.pop()
                span = spans[parent]
                context = Context() if span is None else trace.set_span_in_context(span, Context())
                for child in children[parent]:
                    spans[child] = self._start(entries[child], lap.step, context, None)
                    pending.append(child)
            for index, span in enumerate(spans):  # ended in the order they ended: children first
                if span is not None:
                    self._end(span, entries[index])
        except Exception:
            self.incidents.failed("slow lap export")

    def _lap_span(self, state: ThreadState, lap: Interval, ratio: float) -> trace.Span:
        """Start the lap's span under its step's trace id (in the thread that ran it)."""
        step_traces = self.step_traces
        mine = threading.get_ident() == state.thread.get(THREAD_ID)
        if step_traces is not None and mine:
            context = step_traces.context_for(lap.node.path, lap.step)
        else:
            context = Context()
        extra: dict[str, str | int | float] = {**state.thread, SLOW_LAP: round(ratio, 3)}
        try:
            return self._start((lap.node, lap.start, 0, None), lap.step, context, extra)
        finally:
            if step_traces is not None and mine:
                step_traces.done()

    def _start(
        self,
        entry: Entry,
        step: int,
        context: Context,
        extra: dict[str, str | int | float] | None,
    ) -> trace.Span:
        timer = entry[0]
        attributes: dict[str, str | int | float] = {**self.span_base(timer), STEP: step}
        if extra is not None:
            attributes.update(extra)
        return self.tracer.start_span(
            timer.name,
            context=context,
            attributes=attributes,
            start_time=self.anchor.epoch_ns(entry[1]),
            record_exception=False,
            set_status_on_exception=False,
        )

    def _end(self, span: trace.Span, entry: Entry) -> None:
        end_span(span, self.anchor.epoch_ns(entry[2]), entry[3], self.incidents)


def entries_of(record: list[object]) -> list[Entry]:
    """Return the entries of a thread's flat record, in the order their intervals ended."""
    return [
        cast(Entry, tuple(record[index : index + ENTRY_ITEMS]))
        for index in range(0, len(record), ENTRY_ITEMS)
    ]


def nest(entries: list[Entry]) -> list[list[int]]:
    """Return the children (indices, in start order) of each entry; the last entry is the root.

    Entries are in the order their intervals ended, so an interval's descendants come before
    it. Each entry claims the unclaimed latest entries that lie within its time and whose
    timer is below its own (or is its own: recursion). What nothing claimed goes to the root.
    """
    children: list[list[int]] = [[] for _ in entries]
    unclaimed: list[int] = []
    for index, (timer, start, end, _error) in enumerate(entries):
        mine = children[index]
        while unclaimed:
            below = entries[unclaimed[-1]]
            if below[1] < start or below[2] > end or not _nested(below, timer, start):
                break
            mine.append(unclaimed.pop())
        mine.reverse()
        unclaimed.append(index)
    root = len(entries) - 1
    if root >= 0:
        unclaimed.pop()
        children[root][:0] = unclaimed
    return children


def _nested(entry: Entry, timer: Timer, start: int) -> bool:
    """Whether `entry` can be a child of an interval of `timer` that started at `start`.

    Besides in its ancestors' intervals, a section's interval nests in one that runs inside an
    open entry of a sibling section (`Timer._enter`): an interval of a timer below its parent
    that is not its own descendant.
    """
    entered = entry[0]
    if entered is not timer:
        if _below(entered, timer):
            return True
        parent = entered.parent
        if parent is None or not _below(timer, parent) or _below(timer, entered):
            return False
    # Recursion, or a section entered inside a sibling's entry: unless it is an earlier
    # interval that ended as this one began.
    return not (entry[2] == start and entry[1] == start)


def _below(timer: Timer, ancestor: Timer) -> bool:
    """Whether `ancestor` is a proper ancestor of `timer`."""
    found = timer.parent
    while found is not None:
        if found is ancestor:
            return True
        found = found.parent
    return False


def _in_lap(entry: Entry, lap: Interval) -> bool:
    """Whether `entry` is an interval of `lap`'s timer or below it that began within the lap."""
    timer = entry[0]
    return entry[1] >= lap.start and (timer is lap.node or _below(timer, lap.node))


def _subtree(record: list[Entry], lap: Interval) -> list[Entry]:
    """Return the recorded entries of `lap`, in the order they ended."""
    return [entry for entry in record if _in_lap(entry, lap)]
