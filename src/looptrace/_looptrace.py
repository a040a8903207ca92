"""The object `configure()` returns: timers, `reset()`, `health()` and `shutdown()`."""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Callable, Mapping

from looptrace._core.engine import Engine
from looptrace._core.timer import Timer
from looptrace._distributed.across_ranks import reduce_or_keep
from looptrace._distributed.ranks import RankInfo
from looptrace._export.outputs import Outputs
from looptrace._export.processor import AggregatingSpanProcessor
from looptrace._stats.aggregator import Aggregator
from looptrace._stats.health import Health, Incidents
from looptrace._stats.roles import Roles
from looptrace._stats.snapshot import Snapshot
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
    ) -> None:
        self._engine = engine
        self._aggregator = aggregator
        self._incidents = incidents
        self.rank = rank
        self._outputs = outputs
        self._processor = processor
        self._window_start = engine.now()
        self._subtree_starts: dict[str, int] = {}  # timer path -> its last own reset
        self._shutdown_lock = threading.Lock()
        self.root = Timer(engine, "root", None)
        self.roles = Roles()  # configure(roles=..., wait_sections=...)
        self.limits: Mapping[str, float] = DEFAULTS  # configure(diagnosis_thresholds=...)
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

    def _close_window(
        self, *, across_ranks: bool, final: bool, subtree: str | None = None
    ) -> Snapshot:
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
                closed.roles, closed.limits = self.roles, self.limits
                return reduce_or_keep(closed, self._incidents, reduce=across_ranks)
            engine.windows.close(now, final=final, subtree=subtree)
            if final:
                engine.closed = True
            if self._processor is not None:
                self._processor.merge_pending()
            snapshot = aggregator.snapshot(
                start_ns=engine.anchor.epoch_ns(start),
                end_ns=engine.anchor.epoch_ns(now),
                rank=self.rank.rank,
                step=engine.windows.steps_done(subtree),
                subtree=subtree,
            )
        snapshot.roles, snapshot.limits = self.roles, self.limits
        snapshot = reduce_or_keep(snapshot, self._incidents, reduce=across_ranks)  # counts it
        for sink in self._outputs.on_reset:
            try:
                sink(snapshot)
            except Exception:
                self._incidents.failed(f"reset output {sink!r}")
        return snapshot

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

    def shutdown(self) -> None:
        """Close a last window, flush it and the spans, and release exporters; idempotent.

        Sections still running end now: they count in the last window and their spans are
        exported with status ERROR ("cut"), so every exported span's parent is exported too.
        Timers stay usable as counted no-ops, so a loop that outlives its telemetry runs on.
        A second call, from any thread, returns once the first has finished.
        """
        with self._shutdown_lock:
            engine = self._engine
            if engine.closed:
                return
            self._close_window(across_ranks=False, final=True)
            for close in self._outputs.on_shutdown:
                try:
                    close()
                except Exception:
                    self._incidents.failed(f"shutdown of {close!r}")
        atexit.unregister(self.shutdown)  # registered by the exit flush, if any

    def _after_fork_in_child(self) -> None:
        self._incidents.after_fork_in_child()
        self._aggregator.after_fork_in_child()
        if self._processor is not None:
            self._processor.after_fork_in_child()
        self._engine.windows.after_fork_in_child()
        self._shutdown_lock = threading.Lock()
        self._window_start = self._engine.now()


def _after_fork_hook(lt: Looptrace) -> Callable[[], None]:
    ref = weakref.ref(lt)

    def hook() -> None:
        target = ref()
        if target is not None:
            target._after_fork_in_child()

    return hook
