"""Slow laps are traced whatever the sampling: a compact record per lap, exported when slow.

While an untraced outermost lap runs and something reads spans, every interval that ends in
its thread is kept as four items `timer, start_ns, end_ns, error` of a flat list on the
thread's state: no span object, no context, not even a tuple for the garbage collector. When
the lap ends its duration is compared with the median of that timer's recent laps in this
thread; a lap more than `factor` times the median is a candidate, else the record is dropped.

A lap slow against the usual laps whose sections differ from the usual step's (an evaluation
step: its *kind* is the set of its sections' timers) is judged against the recent laps of its
own kind once `MIN_KIND_LAPS` of them were seen, so a regular evaluation step is not slow
every time, and an unusually slow one still is.

Candidates wait, as their compact records, for their timer's window of `WINDOW` laps to end:
the window exports its `BUDGET` worst (by their ratio to the median they were judged
against), each in full (the lap span and every section span, real timestamps, nesting rebuilt
from timer ancestry and time containment, under the step's trace id); the others are counted
as suppressed. So a burst of small noise early in a window cannot crowd out the big slow laps
after it. The last window's candidates are exported when the thread's laps end for good
(shutdown, thread exit). With nothing reading spans no lap is watched and nothing is recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, cast

from opentelemetry import trace
from opentelemetry.context import Context

from looptrace._base.attributes import SLOW_LAP, STEP, STEP_OF, THREAD_ID
from looptrace._core.clock import EpochAnchor
from looptrace._core.ids import StepTraces
from looptrace._core.intervals import discard
from looptrace._core.spans import end_span
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
MIN_KIND_LAPS: Final = 5  # laps of an unusual kind seen before they are judged among themselves
MAX_KINDS: Final = 8  # unusual kinds remembered per timer; later ones count as usual laps
RING: Final = 32  # recent lap durations kept per timer and thread (and per kind)
MEDIAN_EVERY: Final = 16  # laps between two recomputations of the median
WINDOW: Final = 60  # laps of a timer whose slow candidates compete for one budget
BUDGET: Final = 3  # slow laps exported per window at most: the worst ones
# A lap is slow only if it also takes this much longer than the median: a 30 µs step that
# took 100 µs is scheduling noise, not a straggler worth a trace.
MIN_EXCESS_NS: Final = 1_000_000
# Entries a thread's record may hold, checked when the thread merges its measurements: a lap
# with more sections than this would flood a backend as a trace, and must not grow memory.
MAX_RECORD: Final = 65_536


class Candidate:
    """A slow lap waiting for its window to end: what its export needs, and its ratio."""

    __slots__ = ("entries", "implicit", "memory", "ratio", "start", "step", "timer")

    def __init__(  # noqa: PLR0917 - a record of one slow lap, made in one place
        self,
        timer: Timer,
        start: int,
        step: int,
        ratio: float,
        entries: list[Entry],
        memory: dict[str, int],
        implicit: bool = False,
    ) -> None:
        self.timer = timer
        self.start = start
        self.step = step
        self.ratio = ratio
        self.entries = entries  # its subtree's intervals in the order they ended, itself last
        self.memory = memory  # the memory attributes when it ended (`LapSpans.memory`)
        # A never-lapped timer's step (`Interval.implicit`): its one section is the root span.
        self.implicit = implicit


class Durations:
    """Recent durations of one kind of lap, and their median."""

    def __init__(self, min_laps: int) -> None:
        self.min_laps = min_laps
        self.ring: list[int] = []
        self.next = 0  # where the next duration goes once the ring is full
        self.median = 0
        self.since = 0  # laps added since the median was computed

    def ratio(self, duration: int, factor: float) -> float:
        """Return `duration` over the recent median if slow (see `MIN_EXCESS_NS`), else 0."""
        median = self.median
        if (
            len(self.ring) < self.min_laps
            or median <= 0
            or duration <= factor * median
            or duration - median < MIN_EXCESS_NS
        ):
            return 0.0
        return duration / median

    def add(self, duration: int) -> bool:
        """Keep a finished lap's duration; refresh the median every few laps (then True)."""
        ring = self.ring
        if len(ring) < RING:
            ring.append(duration)
        else:
            ring[self.next] = duration
            self.next = (self.next + 1) % RING
        self.since += 1
        if self.since >= MEDIAN_EVERY or len(ring) == self.min_laps:
            # The lower median, as the window's nearest-rank p50 that the diagnosis's
            # `slow_steps` compares with: one definition of a slow step for both.
            self.median = sorted(ring)[(len(ring) - 1) // 2]
            self.since = 0
            return True
        return False


class LapTimes(Durations):
    """Recent laps of one outermost timer in one thread, by kind; its window's candidates."""

    def __init__(self) -> None:
        super().__init__(MIN_LAPS)
        self.usual: frozenset[Timer] | None = None  # the sections of a usual lap, when known
        self.kinds: dict[frozenset[Timer], Durations] = {}
        self.laps = 0  # laps judged or added, to cut windows
        self.candidates: list[Candidate] = []  # at most BUDGET, the worst of the window so far

    def place(self, ratio: float) -> int:
        """Return where a candidate of `ratio` goes: a free place, the least slow one, or -1.

        -1 means the window's budget holds slower (or as slow) candidates only.
        """
        candidates = self.candidates
        if len(candidates) < BUDGET:
            return len(candidates)
        least = min(range(len(candidates)), key=lambda index: candidates[index].ratio)
        return least if candidates[least].ratio < ratio else -1


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
        memory: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self.memory = memory  # the memory attributes of a lap ending now (`LapSpans.memory`)
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

        A slow lap becomes a candidate of its timer's window; the lap that ends a window has
        its window's worst candidates exported. A lap `cut` by shutdown is neither judged nor
        kept in the recent durations.
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
            record = state.record
            if not recorded or record is None:
                times.add(duration)
            else:
                ratio = times.ratio(duration, self.factor)
                if ratio > 0.0:
                    self._judge(times, lap, now, duration, ratio, record)
                elif times.add(duration):
                    times.usual = kind_of(record, lap)  # a usual lap, seen every few laps
            times.laps += 1
            if times.laps % WINDOW == 0 and times.candidates:
                self._export_all(state, times)
        if not recording:  # else its entries go when the thread's last recorded lap ends
            state.record = None

    def _judge(  # noqa: PLR0917 - the ended lap's parts, called once per slow lap
        self,
        times: LapTimes,
        lap: Interval,
        now: int,
        duration: int,
        ratio: float,
        record: list[object],
    ) -> None:
        """Judge a lap slow against the usual laps by its own kind; keep it if among the worst."""
        kind = kind_of(record, lap)
        usual = times.usual
        kinds = times.kinds
        durations = None if usual is None or kind == usual else kinds.get(kind)
        if durations is None and usual is not None and kind != usual and len(kinds) < MAX_KINDS:
            durations = kinds[kind] = Durations(MIN_KIND_LAPS)
        if durations is None:  # a slow lap of the usual kind
            times.add(duration)
        else:  # judged among its own kind once enough of them were seen
            if len(durations.ring) >= durations.min_laps:
                ratio = durations.ratio(duration, self.factor)
            durations.add(duration)
            if ratio == 0.0:
                return
        candidates = times.candidates
        place = times.place(ratio)
        if place < len(candidates):  # one candidate is let go: this one, or a less slow one
            self.incidents.slow_lap_suppressed()
            if place < 0:
                return
        entries = _subtree(entries_of(record), lap)
        if not entries or entries[-1][0] is not lap.node:
            entries.append((lap.node, lap.start, now, None))
        memory = {} if self.memory is None else self.memory()
        candidate = Candidate(lap.node, lap.start, lap.step, ratio, entries, memory, lap.implicit)
        if place == len(candidates):
            candidates.append(candidate)
        else:
            candidates[place] = candidate

    def flush(self, state: ThreadState) -> None:
        """Export the candidates of every timer of a thread whose laps end for good."""
        for node in list(state.tops):
            times = node.lap_times
            if times is not None and times.candidates:
                self._export_all(state, times)

    def _export_all(self, state: ThreadState, times: LapTimes) -> None:
        """Export a window's candidates, in the order their laps ran; the window starts anew."""
        candidates = times.candidates
        times.candidates = []
        for candidate in sorted(candidates, key=lambda found: found.start):
            self.export(state, candidate)

    def export(self, state: ThreadState, candidate: Candidate) -> None:
        """Export a candidate lap and the intervals of its subtree, as spans."""
        try:
            entries = candidate.entries
            children = nest(entries)
            root = len(entries) - 1
            if candidate.implicit and len(children[root]) == 1:
                root = children[root][0]  # the section a never-lapped timer's step is
            spans: list[trace.Span | None] = [None] * len(entries)
            spans[root] = self._lap_span(state, candidate, entries[root])
            pending = [root]
            while pending:
                parent = pending.pop()
                span = spans[parent]
                context = Context() if span is None else trace.set_span_in_context(span, Context())
                for child in children[parent]:
                    spans[child] = self._start(entries[child], candidate.step, context, None)
                    pending.append(child)
            for index, span in enumerate(spans):  # ended in the order they ended: children first
                if span is not None:
                    self._end(span, entries[index])
        except Exception:
            self.incidents.failed("slow lap export")

    def _lap_span(self, state: ThreadState, lap: Candidate, entry: Entry) -> trace.Span:
        """Start the span of `entry` as the root of the lap's step, under its trace id.

        `entry` is the lap's own, or the section a never-lapped timer's step is; the trace
        id is the step's in the thread that ran it.
        """
        step_traces = self.step_traces
        mine = threading.get_ident() == state.thread.get(THREAD_ID)
        if step_traces is not None and mine:
            context = step_traces.context_for(lap.timer.path, lap.step)
        else:
            context = Context()
        extra: dict[str, str | int | float] = {
            **state.thread,
            SLOW_LAP: round(lap.ratio, 3),
            **lap.memory,
        }
        if entry[0] is not lap.timer:  # the section a never-lapped timer's step is
            extra[STEP_OF] = lap.timer.path
        try:
            return self._start(entry, lap.step, context, extra)
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


def kind_of(record: list[object], lap: Interval) -> frozenset[Timer]:
    """Return the timers of the sections recorded in `lap`: what kind of lap it is."""
    timers = {
        cast("Timer", record[index])
        for index in range(0, len(record), ENTRY_ITEMS)
        if cast(int, record[index + 1]) >= lap.start
    }
    node = lap.node
    return frozenset(timer for timer in timers if timer is not node and _below(timer, node))


def _subtree(record: list[Entry], lap: Interval) -> list[Entry]:
    """Return the recorded entries of `lap`, in the order they ended."""
    return [entry for entry in record if _in_lap(entry, lap)]
