"""Per-thread timer state: running intervals, their nesting, and pending measurements."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context

from looptrace._stats.aggregator import FOLD_AT
from looptrace._stats.attributes import THREAD_ID, THREAD_NAME

if TYPE_CHECKING:
    from looptrace._core.device import DeviceQueue, DeviceTrack
    from looptrace._core.slow_laps import LapTimes
    from looptrace._core.timer import Timer
    from looptrace._stats.aggregator import Aggregator


class NodeState:
    """One timer in one thread: its running intervals, laps, and measurements not yet merged."""

    __slots__ = (
        "carry_ns",
        "durations",
        "errors",
        "held",
        "lap_times",
        "lapped",
        "laps",
        "path",
        "self_ns",
        "stack",
    )

    def __init__(self, path: str) -> None:
        self.path = path
        self.stack: list[Interval] = []
        self.held: list[Interval] = []  # entries of `with section:` / `start()`, to end on exit
        self.laps = 0
        self.lapped = False  # started or lapped by record(): its laps are the user's steps
        self.durations: list[int] = []
        self.self_ns = 0
        self.errors = 0
        # Total time not in `durations`: + the part before a cut of a running interval,
        # - the earlier parts of a cut interval that ended (counted whole in `durations`).
        self.carry_ns = 0
        self.lap_times: LapTimes | None = None  # recent laps, to find slow ones (outermost)

    def count(
        self, whole_ns: int, last_ns: int, child_ns: int, earlier_ns: int, error: bool
    ) -> bool:
        """Count one ended interval; return whether `FOLD_AT` measurements wait to be merged.

        The fold every producer of durations shares (timers, device events, other spans):
        `whole_ns` is the interval's whole duration, `last_ns` its part in this window (after
        any reset cut), `child_ns` its children's time in that part, and `earlier_ns` the part
        earlier windows' totals hold already (see `carry_ns`).
        """
        durations = self.durations
        durations.append(whole_ns)
        self.carry_ns -= earlier_ns
        self.self_ns += last_ns - child_ns
        if error:
            self.errors += 1
        return len(durations) >= FOLD_AT

    def merge_into(self, aggregator: Aggregator) -> None:
        """Hand the pending measurements to the window and start collecting anew.

        The caller holds the aggregator's lock and, for a thread's timer, the thread's lock.
        """
        aggregator.merge(self.path, self.durations, self.self_ns, self.errors, self.carry_ns)
        self.drop()

    def drop(self) -> None:
        """Forget the pending measurements."""
        self.durations, self.self_ns, self.errors, self.carry_ns = [], 0, 0, 0

    @property
    def pending(self) -> bool:
        """Whether anything waits to be merged."""
        return bool(self.durations or self.carry_ns or self.self_ns)


class Interval:
    """One running measurement of a timer in one thread.

    `seg_start` and `child_ns` describe the part inside the current reset window: `reset()`
    moves `seg_start` to the cut and zeroes `child_ns`, the children's time in that part;
    `start` stays, so the interval is counted whole when it ends.
    A section entry keeps its interval as a token to end on exit, so `held` intervals are
    never recycled by `Engine.switch_in_place`.
    """

    __slots__ = (
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
        self.children: list[Interval] = []
        self.start = now  # of the whole interval; `seg_start` moves at each reset cut
        self.seg_start = now
        self.child_ns = 0
        self.step = step
        self.span = span
        self.held = False  # a section entry holds this object: never reuse it in place
        self.implicit = False  # started by a section entry only: ends with that section
        self.context: Context | None = None  # `span` as a parent, made on first use
        self.device: DeviceTrack | None = None  # events of a device-timed interval


class ThreadState:
    """The timers of one thread; only `reset()` and thread exit contend for its lock."""

    __slots__ = (
        "acquire",
        "device",
        "fold_due",
        "last_cut",
        "lock",
        "nodes",
        "outermost",
        "record",
        "recording",
        "release",
        "thread",
        "watched",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Its methods, bound once: the hot path calls them without looking them up.
        self.acquire: Callable[[], bool] = self.lock.acquire
        self.release: Callable[[], None] = self.lock.release
        self.nodes: dict[Timer, NodeState] = {}
        self.outermost: list[Interval] = []
        self.fold_due = False  # some node holds FOLD_AT measurements: merge after the call
        self.last_cut = 0  # the instant of the latest `reset()` cut of this thread
        self.device: DeviceQueue | None = None  # device segments waiting for their events
        # Slow laps: the outermost laps judged when they end, those of them untraced, and
        # while any is, every interval that ends in this thread (None: nothing recorded).
        self.watched: list[Interval] = []
        self.recording: list[Interval] = []
        self.record: list[object] | None = None  # see `slow_laps.ENTRY_ITEMS`
        # Made in the thread it describes. Outermost lap spans carry it (their sections are in
        # the same thread), so viewers can lay threads apart.
        self.thread: dict[str, str | int] = {
            THREAD_ID: threading.get_ident(),
            THREAD_NAME: threading.current_thread().name,
        }

    def renew_lock(self) -> None:
        """Replace the lock (in a forked child, where another thread may have held it)."""
        self.lock = threading.Lock()
        self.acquire = self.lock.acquire
        self.release = self.lock.release

    def node(self, timer: Timer) -> NodeState:
        """Return the state of `timer` in this thread, creating it on first use."""
        state = self.nodes.get(timer)
        if state is None:
            state = self.nodes[timer] = NodeState(timer.path)
        return state

    def merge_all(self, aggregator: Aggregator) -> None:
        """Merge every timer's pending measurements; the caller holds both locks."""
        self.fold_due = False
        for node in self.nodes.values():
            if node.pending:
                node.merge_into(aggregator)

    def drop_all(self) -> None:
        """Forget every timer's pending measurements (a forked child's copy of them)."""
        self.fold_due = False
        for node in self.nodes.values():
            node.drop()


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
