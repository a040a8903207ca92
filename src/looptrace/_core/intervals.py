"""Per-thread timer state: running intervals, their nesting, and pending measurements."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Final, cast

from opentelemetry import trace
from opentelemetry.context import Context

from looptrace._base.attributes import THREAD_ID, THREAD_NAME
from looptrace._core.threadkey import thread_key
from looptrace._stats.aggregator import ENTRY_ITEMS, FOLD_AT, Adjustment
from looptrace._stats.tally import Tally

if TYPE_CHECKING:
    from looptrace._core.device import DeviceQueue, DeviceTrack
    from looptrace._core.slow_laps import LapTimes
    from looptrace._core.timer import Timer
    from looptrace._stats.aggregator import Aggregator


class NodeState:
    """One timer in one thread: its running intervals and laps.

    What its intervals measure goes to its thread's log (`ThreadState.log`).
    """

    __slots__ = (
        "entry",
        "lap_times",
        "lapped",
        "laps",
        "owner",
        "path",
        "spare",
        "stack",
    )

    def __init__(self, path: str, owner: ThreadState) -> None:
        self.path = path
        self.owner = owner  # the thread state holding this one
        self.stack = slot_list()  # its running intervals, outermost first
        # The latest entry of `with section:` / `start()` to end on exit; earlier ones below it
        # (`Interval.below`): a stack with no list to grow and shrink.
        self.entry: Interval | None = None
        self.laps = 0
        self.lapped = False  # started or lapped by record(): its laps are the user's steps
        self.lap_times: LapTimes | None = None  # recent laps, to find slow ones (outermost)
        # An ended, untraced interval that nothing holds any more (a section entry left, or
        # the step of a never-lapped timer): its next interval reuses the object.
        self.spare: Interval | None = None

    def next_lap(self) -> int:
        """Count an outermost lap that starts; return its number (the first is 0).

        A timer's first outermost lap lists it in its thread's `tops`.
        """
        step = self.laps
        self.laps = step + 1
        if not step:
            self.owner.tops.append(self)
        return step

    def push_entry(self, interval: Interval) -> None:
        """Hold a section entry's interval, to end on its exit."""
        interval.below = self.entry
        self.entry = interval

    def pop_entry(self) -> Interval | None:
        """Return the latest section entry held and forget it (None: none is held)."""
        interval = self.entry
        if interval is not None:
            self.entry = interval.below
            interval.below = None
        return interval


class Interval:
    """One running measurement of a timer in one thread.

    `seg_start` and `child_ns` describe the part inside the current reset window: `reset()`
    moves `seg_start` to the cut and zeroes `child_ns`, the children's time in that part;
    `start` stays, so the interval is counted whole when it ends.
    A section entry keeps its interval as a token to end on exit, so `held` intervals are
    never recycled by `Engine.switch_in_place`.
    """

    __slots__ = (
        "below",
        "child_ns",
        "children",
        "context",
        "device",
        "held",
        "implicit",
        "node",
        "parent",
        "seg_start",
        "span",
        "start",
        "state",
        "step",
    )

    def __init__(  # noqa: PLR0917 - positional: one is made per section, on the hot path
        self,
        node: Timer,
        state: NodeState,
        parent: Interval | None,
        now: int,
        step: int,
        span: trace.Span | None,
    ) -> None:
        self.node = node
        self.state = state
        self.parent = parent
        self.children = slot_list()
        self.start = now  # of the whole interval; `seg_start` moves at each reset cut
        self.seg_start = now
        self.child_ns = 0
        self.step = step
        self.span = span
        self.held = False  # a section entry holds this object: never reuse it in place
        self.implicit = False  # started by a section entry only: ends with that section
        self.context: Context | None = None  # `span` as a parent, made on first use
        self.device: DeviceTrack | None = None  # events of a device-timed interval
        self.below: Interval | None = None  # the entry held before this one (`NodeState.entry`)

    def restart(
        self, parent: Interval | None, now: int, step: int, span: trace.Span | None
    ) -> Interval:
        """Make this ended interval (no children, held by nothing) a new one of its timer."""
        self.parent = parent
        self.start = self.seg_start = now
        self.child_ns = 0
        self.step = step
        self.span = span
        self.held = self.implicit = False
        self.context = None
        self.device = None
        return self


MAX_CLAIM_SLEEP_S: Final = 0.001  # the longest pause of a claimer waiting for a timer call
CLAIM_TIMEOUT_S: Final = 1.0  # the longest a claimer waits for a timer call under way


class ThreadState:
    """The timers of one thread (or asyncio task), and who may work on them now.

    The thread's own timer calls take no lock. A call marks the state `busy`, then looks
    at `claimed`; another thread (`reset()`, the close of an exited thread) holds `lock`,
    marks the state `claimed`, then waits until it is not `busy`. Under the GIL each sees
    the other's mark, so they never work on the state at once: the owner of a claimed
    state waits on `lock`, not busy (`wait_turn`). Every claimer also holds the
    aggregator's lock, so the owner merges under that lock alone. A claimer waits for a
    call under way for a bounded time only (a span processor of the call may block); it
    then leaves the state to its owner. `shutdown()` leaves each state it closed claimed
    for good (`final`): a call that got past its `closed` check then does nothing.
    """

    __slots__ = (
        "adjustments",
        "busy",
        "claimed",
        "counts",
        "device",
        "final",
        "fold_due",
        "key",
        "last_cut",
        "lock",
        "log",
        "nodes",
        "outermost",
        "record",
        "recording",
        "tasks",
        "thread",
        "tops",
        "watched",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()  # held by a claimer
        self.busy = False  # the owner is inside a timer call
        self.claimed = False  # a claimer works, or waits to work, on this state
        self.final = False  # closed for good by `shutdown()`: stays claimed, no call works
        self.key = thread_key()  # the thread it was made in
        self.tasks = 0  # the states of this thread's asyncio tasks not done yet
        self.nodes: dict[Timer, NodeState] = {}
        self.tops: list[NodeState] = []  # the timers with outermost laps here, first lap first
        self.outermost = slot_list()
        # What its intervals measured in the window, not merged yet: `ENTRY_ITEMS` per ended
        # interval, flat, in the order they ended; and the rare adjustments (`Adjustment`).
        # One list, whatever the number of paths, which `reset()` hands over whole.
        self.log: list[object] = []
        self.adjustments: list[Adjustment] = []
        # Units counted in the window (`Timer.count`), by (timer path, unit): handed over
        # whole with the log at the cut.
        self.counts: dict[tuple[str, str], Tally] = {}
        self.fold_due = False  # the log holds FOLD_AT intervals: merge after the call
        self.last_cut = 0  # the instant of the latest `reset()` cut of this thread
        self.device: DeviceQueue | None = None  # device segments waiting for their events
        # Slow laps: the outermost laps judged when they end, those of them untraced, and
        # while any is, every interval that ends in this thread (None: nothing recorded).
        self.watched = slot_list()
        self.recording = slot_list()
        self.record: list[object] | None = None  # see `slow_laps.ENTRY_ITEMS`
        # Made in the thread it describes. Outermost lap spans carry it (their sections are in
        # the same thread), so viewers can lay threads apart.
        self.thread: dict[str, str | int] = {
            THREAD_ID: threading.get_ident(),
            THREAD_NAME: threading.current_thread().name,
        }

    def wait_turn(self) -> bool:
        """Wait, not busy, until no other thread claims this state; then be busy again.

        The owner calls this when it found the state claimed on entering a timer call.
        Returns False, at once, when `shutdown()` closed the state: the call does nothing.
        """
        while self.claimed:
            if self.final:
                return False
            self.busy = False
            with self.lock:  # the claimer holds it until it is done
                pass
            self.busy = True
        return True

    def claim(self, timeout_s: float = CLAIM_TIMEOUT_S) -> bool:
        """Take this state from its owner: wait for the owner's running timer call to end.

        The caller holds the aggregator's lock and calls `unclaim()` (or `close()`) when
        done. Returns False, with the state left to its owner, when the call under way
        outlasts `timeout_s` (a span processor that blocks; a signal handler waiting in it).
        """
        self.lock.acquire()
        self.claimed = True
        if not self.busy:
            return True
        deadline = time.monotonic() + timeout_s
        pause = 0.0
        while self.busy:  # a timer call is a few microseconds
            if time.monotonic() >= deadline:
                self.unclaim()
                return False
            time.sleep(pause)
            pause = min(2 * pause + 1e-6, MAX_CLAIM_SLEEP_S)
        return True

    def unclaim(self) -> None:
        """Hand the state back to its owner."""
        self.claimed = False
        self.lock.release()

    def close(self) -> None:
        """Hand the claimed state back closed for good: its owner's later calls do nothing."""
        self.final = True
        self.lock.release()  # (`claimed` stays: an owner's call under way sees it, then `final`)

    def renew_lock(self) -> None:
        """Forget every claim (in a forked child, where another thread may have held one)."""
        self.lock = threading.Lock()
        self.busy = self.claimed = False

    def node(self, timer: Timer) -> NodeState:
        """Return the state of `timer` in this thread, creating it on first use."""
        state = self.nodes.get(timer)
        if state is None:
            state = self.nodes[timer] = NodeState(timer.path, self)
        timer.mine = state
        return state

    def count(self, path: str, whole_ns: int, last_ns: int, child_ns: int, error: bool) -> None:
        """Log one ended interval of `path`; set `fold_due` once `FOLD_AT` wait to be merged.

        `whole_ns` is the interval's whole duration, `last_ns` its part in this window (after
        any reset cut, whose earlier part earlier windows' totals hold already), and
        `child_ns` its children's time in that part.
        """
        log = self.log
        earlier_ns = whole_ns - last_ns
        log.append(path)
        log.append(whole_ns)
        log.append(earlier_ns + child_ns)  # what is not its self time: 0 for a plain leaf
        if earlier_ns or error:
            self.adjustments.append((path, -earlier_ns, 0, 1 if error else 0))
        if len(log) >= FOLD_AT * ENTRY_ITEMS:
            self.fold_due = True

    def count_cut(self, path: str, part_ns: int, child_ns: int) -> None:
        """Log the part before a reset cut of a running interval (window time, no duration)."""
        self.adjustments.append((path, part_ns, part_ns - child_ns, 0))

    def merge_all(self, aggregator: Aggregator) -> None:
        """Group the log into the window now (bounding memory), and start a new one.

        The caller holds the aggregator's lock, and either claims this state or is its owner
        outside any timer call.
        """
        aggregator.fold_log(*self._take_log())

    def hand_over(self, aggregator: Aggregator) -> None:
        """Hand the log to the window whole, to be grouped when it is read; start a new one.

        The caller holds the aggregator's lock and claims this state.
        """
        aggregator.take(*self._take_log())
        counts = self.counts
        if counts:
            self.counts = {}
            aggregator.take_counts(counts)

    def drop_all(self) -> None:
        """Forget the log and the counts (a forked child's copy of them)."""
        self._take_log()
        self.counts = {}

    def _take_log(self) -> tuple[list[object], list[Adjustment]]:
        """Return the log and its adjustments, and start new ones."""
        self.fold_due = False
        log, adjustments = self.log, self.adjustments
        self.log, self.adjustments = [], []
        return log, adjustments


def slot_list() -> list[Interval]:
    """Return an empty list with room for one interval, to fill and empty with no allocation.

    CPython keeps a list's room while it shrinks to at least half of it, so a list with room
    for one item goes from empty to one item and back for free. A list with more room that
    `pop()` empties is reallocated to nothing through the C allocator, and one that `clear()`
    or `remove()` empties is freed, so either allocates again on the next `append()`. A list
    literal of one item has room for exactly one.
    """
    items: list[Interval | None] = [None]
    items.pop()
    return cast("list[Interval]", items)


def discard(items: list[Interval], item: Interval) -> None:
    """Remove `item` from `items`; the last one by `pop()`, which keeps a one-slot list's room."""
    if items[-1] is item:
        items.pop()
    else:
        items.remove(item)


def find(state: ThreadState, timer: Timer) -> NodeState | None:
    """Return the state of `timer` in `state`'s thread, None if it never ran there.

    The timer keeps the state it was found with last (one read, so threads sharing the
    timer never see half an update); a thread that finds another thread's looks it up.
    """
    mine = timer.mine
    if mine is not None and mine.owner is state:
        return mine
    mine = state.nodes.get(timer)
    if mine is not None:
        timer.mine = mine
    return mine


def descendants(interval: Interval) -> list[Interval]:
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
