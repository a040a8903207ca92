"""The object `configure()` returns: timers, `reset()`, `health()` and `shutdown()`."""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from collections.abc import Callable, Mapping

from looptrace._core.engine import Engine
from looptrace._core.open_sections import OpenSection, read_open
from looptrace._core.own_time import skip_own_time
from looptrace._core.timer import Timer
from looptrace._diagnosis.history import RunHistory
from looptrace._distributed.across_ranks import reduce_or_keep
from looptrace._distributed.job_histograms import Scale
from looptrace._distributed.ranks import RankInfo
from looptrace._export.exit import release_exit_flush
from looptrace._export.in_order import InOrder
from looptrace._export.outputs import Outputs
from looptrace._export.processor import AggregatingSpanProcessor
from looptrace._stats.aggregator import Aggregator
from looptrace._stats.health import Health, Incidents
from looptrace._stats.memory import MemoryReader
from looptrace._stats.rates import Flops
from looptrace._stats.roles import Roles
from looptrace._stats.snapshot import Snapshot
from looptrace._stats.system_figures import WindowSystem
from looptrace._stats.thresholds import DEFAULTS


class Looptrace:
    """A configured looptrace: the root timer, windows of statistics, and the export pipeline.

    Made by `looptrace.configure()`; `lt.timer("training")` is the usual entry point.
    """

    def __init__(
        self,
        *,
        engine: Engine,
        aggregator: Aggregator,
        incidents: Incidents,
        rank: RankInfo,
        outputs: Outputs,
        processor: AggregatingSpanProcessor | None,
        memory: MemoryReader | None = None,
        flush: Callable[[], bool] | None = None,
    ) -> None:
        self._engine = engine
        self._flush = flush  # the files' and exporters' (None: nothing is written or exported)
        self._memory = MemoryReader() if memory is None else memory
        engine.spans.lap_memory = self._memory.lap  # traced laps' spans carry the memory
        self._aggregator = aggregator
        self._incidents = incidents
        self.rank = rank
        self._outputs = outputs
        self._processor = processor
        self._window_start = engine.now()
        self._subtree_starts: dict[str, int] = {}  # timer path -> its last own reset
        # timer path (None: every timer) -> the step its next window starts in
        self._first_steps: dict[str | None, int] = {}
        self._shutdown_lock = threading.Lock()
        self._in_order = InOrder()  # closed windows reach the outputs in the order they closed
        self.root = Timer(engine, "root", None)
        self.roles = Roles()  # configure(roles=..., wait_sections=...)
        self.limits: Mapping[str, float] = DEFAULTS  # configure(diagnosis_thresholds=...)
        self.flops = Flops()  # configure(peak_flops=..., flops_per_unit=...): MFU
        self._history = RunHistory()  # what memory creep and throughput drops compare with
        self._overhead_ns = 0  # looptrace's own time in resets since the last window closed
        # (configured roles, paths marked `wait=True`, both): the latest window's roles
        self._marked_roles: tuple[Roles, frozenset[str], Roles] | None = None
        self.scale = Scale()  # configure(detail_ranks=..., job_rank=...)
        # The system figures of a closing window (`looptrace.integrations.system`), or None.
        self.system: Callable[[], WindowSystem | None] | None = None
        engine.reset_timer = self._reset_timer
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_hook(self))

    def __repr__(self) -> str:
        return f"Looptrace(rank={self.rank.rank}, closed={self._engine.closed})"

    def timer(self, name: str, *, device: bool | None = None) -> Timer:
        """Return the timer `root.<name>` (the same object on every call).

        Timers made here are independent: starting or lapping one never ends another.
        `device=True` times it on the GPU (see `Timer.timer`).
        """
        return self.root.timer(name, device=device)

    def on_reset(self, callback: Callable[[Snapshot], object]) -> ResetHook:
        """Call `callback(snapshot)` with every window closed from now on; return its handle.

        The argument is the `Snapshot` that `reset()` returns: every window, whether closed by
        `lt.reset()`, a timer's own `reset()` (then `snapshot.subtree` names that timer) or
        `shutdown()` (the last window). The callback runs on the thread that closed the window
        (the one calling `reset()`; at exit or on SIGTERM the one flushing), after the window
        is closed and after looptrace's own outputs, with no looptrace lock held; the caller of
        `reset()` waits for it, so keep it quick. An exception it raises is counted in
        `health().internal_errors` and logged once; it never reaches the caller of `reset()`.
        `handle.remove()` stops the calls, also from inside the callback; removing twice is a
        no-op.

        Raises:
            TypeError: `callback` is not callable.

        """
        if not callable(callback):
            raise TypeError(f"on_reset(): expected a callable, got {callback!r}"[:200])
        hook = ResetHook(self._outputs, callback)
        with _HOOKS_LOCK:  # copied on write: a reset() running elsewhere keeps its own list
            self._outputs.on_reset = [*self._outputs.on_reset, hook]
        return hook

    def internal_error(self, where: str) -> None:
        """Count and log (once per `where`) an exception swallowed so that training goes on.

        For integrations and callbacks that guard their telemetry: call it from inside an
        `except` block; the count is `health().internal_errors`.
        """
        self._incidents.failed(where)

    def reset(self, *, across_ranks: bool = False) -> Snapshot:
        """Close the window at one instant and return its statistics per path.

        Running sections contribute their part before the cut and keep running into the next
        window. The histogram metric is flushed to the configured exporters. Every timer's
        window closes, each since that timer's own last reset (see `Timer.reset`).

        With `across_ranks=True` and an initialised `torch.distributed` process group the
        snapshot also carries `across_ranks`: per path of any rank, the min / max / mean over
        ranks and the slowest rank (see `SectionSpread`). It runs collectives, so every rank
        must call it at the same point. Without a process group it is a no-op: the snapshot
        holds this rank's data and `across_ranks` is None.
        """
        return self._close_window(across_ranks=across_ranks, final=False)

    def _reset_timer(self, timer: Timer, across_ranks: bool) -> Snapshot:
        subtree = None if timer is self.root else timer.path
        return self._close_window(across_ranks=across_ranks, final=False, subtree=subtree)

    def _window_since(self, subtree: str | None, now: int) -> int:
        """Return when the window of `subtree` (None: every timer) began; it begins anew now."""
        if subtree is None:
            start, self._window_start = self._window_start, now
            self._subtree_starts.clear()
            return start
        start = self._window_start
        for path, at in self._subtree_starts.items():
            if subtree == path or subtree.startswith(f"{path}."):
                start = max(start, at)
        self._subtree_starts[subtree] = now
        return start

    def _window_steps(self, subtree: str | None, done: int | None) -> range | None:
        """Return the steps the closing window holds time of; the next one starts at `done`.

        The window starts in the step that ran (or was next) at the previous cut; it ends in
        the last step begun. `lt.reset()` starts every timer's next window.
        """
        begun = self._engine.windows.steps_begun(subtree)
        first = self._first_steps.get(subtree, self._first_steps.get(None, 0))
        if subtree is None:
            self._first_steps.clear()
        if done is not None:
            self._first_steps[subtree] = done
        return None if begun is None else range(first, max(first, begun))

    def _close_window(
        self, *, across_ranks: bool, final: bool, subtree: str | None = None
    ) -> Snapshot:
        """Close a window, then take the time it took out of the calling thread's laps."""
        began = self._engine.now()
        try:
            return self._close(across_ranks=across_ranks, final=final, subtree=subtree)
        finally:
            if not final:
                self._skip_own_time(began)

    def _skip_own_time(self, began: int) -> None:
        """Keep the reset that began at `began` out of the laps; count it as overhead."""
        engine = self._engine
        try:
            ended = engine.now()
            with self._aggregator.lock:
                self._overhead_ns += ended - began
            skip_own_time(engine, began, ended)
        except Exception:
            self._incidents.failed("keeping reset() out of the running laps")

    def _close(self, *, across_ranks: bool, final: bool, subtree: str | None) -> Snapshot:
        engine = self._engine
        aggregator = self._aggregator
        with aggregator.lock:
            now = engine.now()
            start = self._window_since(subtree, now)
            if engine.closed:
                self._incidents.misused("closed", "reset() after shutdown()")
                closed = Snapshot(
                    {}, start_ns=0, end_ns=0, rank=self.rank.rank, subtree=subtree or "root"
                )
                closed.roles, closed.limits, closed.flops = self.roles, self.limits, self.flops
                return reduce_or_keep(
                    closed, self._incidents, reduce=across_ranks, scale=self.scale
                )
            engine.windows.close(now, final=final, subtree=subtree)  # final: closes the engine
            if self._processor is not None:
                self._processor.merge_pending()
            snapshot = aggregator.snapshot(
                start_ns=engine.anchor.epoch_ns(start),
                end_ns=engine.anchor.epoch_ns(now),
                rank=self.rank.rank,
                step=engine.windows.steps_done(subtree),
                subtree=subtree,
            )
            snapshot.steps = self._window_steps(subtree, snapshot.step)
            snapshot.overhead, self._overhead_ns = self._overhead_ns / 1e9, 0
            ticket = self._in_order.ticket()
        with self._in_order.turn(ticket):
            return self._deliver(snapshot, across_ranks=across_ranks, subtree=subtree)

    def _deliver(self, snapshot: Snapshot, *, across_ranks: bool, subtree: str | None) -> Snapshot:
        """Complete a closed window (memory, ranks, history) and hand it to every output."""
        snapshot.roles, snapshot.limits, snapshot.flops = self._roles(), self.limits, self.flops
        try:
            snapshot.hang = self._outputs.standing_hang()
        except Exception:
            self._incidents.failed("reading the standing hang of a window")
        if subtree is None:  # the process's memory: in the windows of every timer only
            try:
                snapshot.memory = self._memory.read()
            except Exception:
                self._incidents.failed("reading the memory of a window")
            if self.system is not None:
                try:
                    snapshot.system = self.system()
                except Exception:
                    self._incidents.failed("reading the system figures of a window")
        try:
            snapshot.past = self._history.add(snapshot, int(self.limits["warmup_windows"]))
        except Exception:
            self._incidents.failed("keeping a window in the run's history")
        snapshot = reduce_or_keep(  # counts the window
            snapshot, self._incidents, reduce=across_ranks, scale=self.scale
        )
        straggler = snapshot.straggler
        if straggler is not None and straggler.chronic_rank is not None:
            # Every rank reduced the same straggler: every rank traces its next step, one trace.
            try:
                self._engine.windows.trace_next(subtree)
            except Exception:
                self._incidents.failed("tracing the step after a chronic straggler")
        for sink in self._outputs.on_reset:
            try:
                sink(snapshot)
            except Exception:
                self._incidents.failed(f"reset output {sink!r}")
        return snapshot

    def _roles(self) -> Roles:
        """Return the configured roles with the paths marked `wait=True` so far."""
        marked = self._engine.wait_paths
        roles = self._marked_roles
        if roles is None or roles[0] is not self.roles or roles[1] is not marked:
            with_marks = self.roles
            if marked:
                with_marks = dataclasses.replace(
                    self.roles, wait_paths=self.roles.wait_paths | marked
                )
            roles = self._marked_roles = (self.roles, marked, with_marks)
        return roles[2]

    def open_sections(self) -> list[OpenSection]:
        """Return every thread's running sections now: path, step, seconds open, nesting depth.

        Read from another thread's point of view without stopping the loop (nothing is
        locked, nothing runs per section): each thread's sections come outermost first, each
        after its parent; a section ending at the same moment may or may not be listed.
        """
        engine = self._engine
        return read_open(engine.states.all(), engine.now())

    def health(self) -> Health:
        """Return the counts of misuse, swallowed errors, overflows, losses, capped slow laps."""
        return Health(
            misuse=self._incidents.misuse,
            internal_errors=self._incidents.internal_errors,
            overflowed=self._aggregator.overflowed,
            dropped_spans=self._incidents.dropped_spans,
            failed_metric_pushes=self._incidents.failed_metric_pushes,
            slow_laps_suppressed=self._incidents.slow_laps_suppressed,
            dropped_windows=self._incidents.dropped_windows,
        )

    def innermost_timer(self) -> Timer | None:
        """Return the innermost timer running in the calling thread (None when none runs).

        It serves an integration that nests its sections in whatever the code runs now.
        """
        outermost = self._engine.state().outermost
        if not outermost:
            return None
        interval = outermost[-1]
        while interval.children:
            interval = interval.children[-1]
        return interval.node

    def flush(self) -> bool:
        """Deliver what the outputs hold now: the windows closed so far and the ended spans.

        Each file and exporter gets its own timeout (the exporters' `timeout`, else the
        files'). Returns whether everything was delivered in time; never raises (a failure is
        counted in `health()`). The training loop never needs it: `reset()` and exit deliver
        on their own. It serves a step that must see the files complete, as before a process
        stops itself or a test reads them.
        """
        if self._flush is None or self._engine.closed:
            return True
        try:
            return self._flush()
        except Exception:
            self._incidents.failed("flush()")
            return False

    def shutdown(self) -> None:
        """Close a last window, flush it and the spans, and release exporters; idempotent.

        Sections still running end now: they count in the last window and their spans are
        exported with status ERROR ("cut"), so every exported span's parent is exported too.
        Timers stay usable as counted no-ops, so a loop that outlives its telemetry runs on.
        A second call, from any thread, returns once the first has finished. Other threads'
        timer calls from the moment it starts do nothing; one under way is waited for a
        bounded time, after which its thread ends what it left running at its next call.
        """
        with self._shutdown_lock:
            engine = self._engine
            if engine.closed:
                return
            for close in self._outputs.on_close:
                try:
                    close()
                except Exception:
                    self._incidents.failed(f"shutdown of {close!r}")
            self._close_window(across_ranks=False, final=True)
            self._memory.release()
            for close in self._outputs.on_shutdown:
                try:
                    close()
                except Exception:
                    self._incidents.failed(f"shutdown of {close!r}")
        release_exit_flush(self)

    def _inside_a_call(self) -> bool:
        """Whether the calling thread may be inside a timer call, a window's close or shutdown.

        The core's own marks say it, whichever core runs (compiled functions have no frames):
        a state of this thread busy, the aggregator's lock or the shutdown lock held, or a
        window being delivered (by any thread, which at worst makes a signal handler leave the
        flush to its helper).
        """
        return (
            self._engine.states.busy_here()
            or self._aggregator.lock.locked()
            or self._shutdown_lock.locked()
            or self._in_order.busy()
        )

    def _in_process_child(self) -> None:
        """Forget the forking thread's running intervals, in a `multiprocessing` child.

        Such a child runs its target and never returns to the code that started them: ended
        at its exit they would count the child's whole life as a lap of the parent's timers.
        """
        self._engine.windows.forget_running()

    def _after_fork_in_child(self) -> None:
        self._incidents.after_fork_in_child()
        self._aggregator.after_fork_in_child()
        if self._processor is not None:
            self._processor.after_fork_in_child()
        self._engine.windows.after_fork_in_child()
        self._shutdown_lock = threading.Lock()
        self._in_order = InOrder()
        self._window_start = self._engine.now()


_HOOKS_LOCK = threading.Lock()  # orders the copy-on-write changes of `Outputs.on_reset`


class ResetHook:
    """The handle `Looptrace.on_reset()` returns: `remove()` stops the calls."""

    __slots__ = ("_outputs", "callback")

    def __init__(self, outputs: Outputs, callback: Callable[[Snapshot], object]) -> None:
        self._outputs = outputs
        self.callback = callback

    def __call__(self, snapshot: Snapshot) -> object:
        """Call the callback with a closed window's snapshot."""
        return self.callback(snapshot)

    def __repr__(self) -> str:
        return f"ResetHook({self.callback!r})"

    @property
    def active(self) -> bool:
        """Whether the callback is still called."""
        return any(sink is self for sink in self._outputs.on_reset)

    def remove(self) -> None:
        """Stop calling the callback; a no-op once removed."""
        with _HOOKS_LOCK:
            outputs = self._outputs
            outputs.on_reset = [sink for sink in outputs.on_reset if sink is not self]


def _after_fork_hook(lt: Looptrace) -> Callable[[], None]:
    ref = weakref.ref(lt)

    def hook() -> None:
        target = ref()
        if target is not None:
            target._after_fork_in_child()

    return hook
