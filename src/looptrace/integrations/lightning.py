"""Lightning: its profiler actions as looptrace sections, or laps from a callback's hooks.

`LooptraceProfiler` is a `lightning.pytorch.profilers.Profiler`: pass it as
`Trainer(profiler=LooptraceProfiler(lt))` and a lap per training batch holds the batch-level
actions as short-named sections (`data`, `to_device`, `optimizer_step` with `training_step` and
`backward` inside, `validation`, `checkpoint`); `keep=` times Lightning's other actions too
(callbacks' hooks …) under their own names. `LooptraceCallback` is for users who keep another
profiler: it laps per batch from the batch hooks and logs a window's statistics with
`pl_module.log_dict`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.profilers import Profiler

from looptrace._core.section import Section
from looptrace._core.timer import Timer
from looptrace._looptrace import Looptrace, ResetHook
from looptrace._offline.summary import merge_path
from looptrace._offline.table import render_table
from looptrace._stats.snapshot import SectionStats, Snapshot
from looptrace.integrations._common import DEFAULT_STATS, checked_stats, failed, flat_metrics
from looptrace.integrations._lightning_actions import (
    BATCH,
    EPOCH,
    FETCH,
    Kind,
    ends_validation,
    kind_of,
    section_name,
    short_name,
    validating,
)

__all__ = ["LooptraceCallback", "LooptraceProfiler", "section_name", "short_name"]


class _Frame:
    """A started action: its name and the section entry that times it."""

    __slots__ = ("action", "section")

    def __init__(self, action: str, section: Section) -> None:
        self.action = action
        self.section = section


class LooptraceProfiler(Profiler):
    """A Lightning profiler whose actions are looptrace sections, with a lap per training batch.

    By default laps of the timer `root.<name>` run from one training batch's data fetch to the
    next (or to the end of the stage), and hold the batch-level actions as sections named by
    `short_name`: `data`, `to_device`, `optimizer_step` (with `training_step` and `backward`
    inside, as Lightning nests them) and `checkpoint`. A validation run is one `validation`
    section, from its first action until training (or saving) goes on, so the epoch-end
    validation and checkpoint count in the last batch's lap and the laps add up to the whole
    training time. The sanity check before training is `root.<name>_fit.validation`. Every
    other action (callbacks' and the module's hooks, setup) is not timed.

    With `keep`, every action it keeps is a section named by `rename`: the laps run from one
    fetch to the next (or to the end of the epoch, or the start of validation), and every
    action outside them (setup, epoch hooks, validation) is a section of the timer
    `root.<name>_fit`, which runs from the first action to the end of the stage;
    `keep=lambda action: True` times everything. Stops arrive by name: stopping an action
    also ends the actions started inside it that are still running, and a stop with no
    running action is ignored.

    `summary()` (Lightning prints it at the end of a stage) closes a window with `lt.reset()`
    and renders looptrace's table of this profiler's sections over the windows since `setup`.

    Args:
        lt: the configured looptrace.
        name: name of the lap timer (`root.lightning`); the actions outside laps go under
            `root.<name>_fit`.
        rename: with `keep`, maps an action to its section name (default `section_name`: dots
            become `:`).
        keep: which actions become sections (default: the batch-level ones, short-named);
            each costs a section per call, so
            `keep=lambda action: not action.startswith("[Callback]")` makes a batch cheaper
            than everything. The data fetch, `run_training_batch`, `run_training_epoch` and
            validation's actions are always kept.
        dirpath: where Lightning writes the summary (see Lightning's `Profiler`).
        filename: file name of the summary; without one it is logged.

    """

    def __init__(
        self,
        lt: Looptrace,
        *,
        name: str = "lightning",
        rename: Callable[[str], str] = section_name,
        keep: Callable[[str], bool] | None = None,
        dirpath: str | None = None,
        filename: str | None = None,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.lt = lt
        self.batches: Timer = lt.timer(name)
        self.fit: Timer = lt.timer(f"{name}_fit")
        self._rename = rename
        self._keep = keep
        self._in_batch: list[_Frame] = []
        self._outside: list[_Frame] = []
        self._windows: list[Snapshot] = []
        self._watching: ResetHook | None = None
        self._trained = False
        self._validation: Section | None = None  # the running `validation` (default mode)
        self._kinds: dict[str, Kind] = {}
        self._sections: dict[tuple[Timer, str], Section] = {}

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """Start collecting this stage's windows for `summary()`."""
        super().setup(stage, local_rank=local_rank, log_dir=log_dir)
        if self._watching is None:
            self._watching = self.lt.on_reset(self._windows.append)

    def start(self, action_name: str) -> None:
        """Start the section of `action_name`; a training batch's data fetch starts a lap."""
        if self._keep is None:
            self._start_short(action_name)
            return
        try:
            kind = self._kinds.get(action_name)
            if kind is None:
                kind = kind_of(action_name)
                if kind is Kind.SECTION and action_name != EPOCH and self._keep is not None:
                    kind = Kind.SECTION if self._keep(action_name) else Kind.SKIP
                self._kinds[action_name] = kind
            if kind is Kind.SKIP:
                return
            if kind is Kind.FETCH:
                # A lap per batch: a prefetch before the batch's training step stays in its lap.
                if self._trained or not self.batches.running:
                    self._close(self._in_batch, 0)
                    self.batches.record()
                    self._trained = False
            elif kind is Kind.BATCH:
                self._trained = True
            elif kind is Kind.OUTSIDE:
                self._end_batch()
            inside = bool(self._in_batch) or self.batches.running
            if not inside and not self.fit.running:
                self.fit.record()  # started by hand: one interval to the stage's end
            frames = self._in_batch if inside else self._outside
            parent = frames[-1].section.timer if frames else (self.batches if inside else self.fit)
            section = self._sections.get((parent, action_name))
            if section is None:
                section = parent.section(self._rename(action_name))
                self._sections[(parent, action_name)] = section
            section.start()
            frames.append(_Frame(action_name, section))
        except Exception:
            failed(self.lt, "LooptraceProfiler.start")

    def _start_short(self, action: str) -> None:
        """`start()` of the default: batch-level actions only, short names, one validation."""
        try:
            if self._validation is not None:
                if action != FETCH and not ends_validation(action):
                    return  # inside the validation run
                self._end_validation()
            if action == FETCH:
                if self._trained or not self.batches.running:
                    self._close(self._in_batch, 0)
                    self.batches.record()
                    self._trained = False
            elif action == BATCH:
                self._trained = True
                return
            elif validating(action):
                parent = self.batches if self.batches.running else self.fit
                self._validation = self._section(parent, "validation")
                self._validation.start()
                return
            name = short_name(action)
            if name is None:
                return
            frames = self._in_batch
            parent = frames[-1].section.timer if frames else self.batches
            section = self._section(parent, name)
            section.start()
            frames.append(_Frame(action, section))
        except Exception:
            failed(self.lt, "LooptraceProfiler.start")

    def _section(self, parent: Timer, name: str) -> Section:
        section = self._sections.get((parent, name))
        if section is None:
            section = self._sections[(parent, name)] = parent.section(name)
        return section

    def _end_validation(self) -> None:
        validation, self._validation = self._validation, None
        if validation is not None:
            validation.stop()

    def stop(self, action_name: str) -> None:
        """End the latest running section of `action_name` and those started inside it."""
        if self._kinds.get(action_name) is Kind.SKIP:
            return
        try:
            for frames in (self._in_batch, self._outside):
                for index in range(len(frames) - 1, -1, -1):
                    if frames[index].action == action_name:
                        if action_name == EPOCH and self._keep is not None:
                            self._end_batch()
                        self._close(frames, index)
                        return
        except Exception:
            failed(self.lt, "LooptraceProfiler.stop")

    def summary(self) -> str:
        """Close a window and return looptrace's table of this profiler's sections so far."""
        try:
            self._end_stage()
            self.lt.reset()
            mine = (self.batches.path, self.fit.path)
            parts: dict[str, list[SectionStats]] = {}
            for window in self._windows:
                for path, stats in window.items():
                    if stats.count and any(path == p or path.startswith(f"{p}.") for p in mine):
                        parts.setdefault(path, []).append(stats)
            self._windows.clear()
            return render_table({path: merge_path(found) for path, found in sorted(parts.items())})
        except Exception:
            failed(self.lt, "LooptraceProfiler.summary")
            return ""

    def teardown(self, stage: str | None) -> None:
        """End what still runs and stop collecting windows."""
        try:
            self._end_stage()
            if self._watching is not None:
                self._watching.remove()
                self._watching = None
        except Exception:
            failed(self.lt, "LooptraceProfiler.teardown")
        super().teardown(stage)

    def __del__(self) -> None:
        # Lightning's profilers tear down when collected; looptrace may be shut down by then.
        super().teardown(self._stage)

    def _end_batch(self) -> None:
        self._close(self._in_batch, 0)
        if self.batches.running:
            self.batches.stop()

    def _end_stage(self) -> None:
        self._end_validation()
        self._end_batch()
        self._close(self._outside, 0)
        if self.fit.running:
            self.fit.stop()

    @staticmethod
    def _close(frames: list[_Frame], index: int) -> None:
        """End `frames[index:]`, innermost first."""
        while len(frames) > index:
            frames.pop().section.stop()


class LooptraceCallback(pl.Callback):
    """Laps per training batch from Lightning's hooks, for runs that keep another profiler.

    The timer `root.<name>` laps per batch: `forward` from the batch start, `backward` between
    `on_before_backward` and `on_after_backward`, `after_backward` up to
    `on_before_optimizer_step`, `optimizer` from there to the batch end, and `data` for the gap
    before the next batch of the epoch. Every `log_every` batches it closes a window with
    `lt.reset()` and logs the chosen statistics with `pl_module.log_dict`, keys like
    `timing/root/train/forward/mean`.

    Args:
        lt: the configured looptrace.
        name: the lap timer's name (`root.train`).
        log_every: batches per window (0: never reset or log).
        stats: the statistics logged per section.
        prefix: the first part of every key.
        sep: separates the parts of a key (`/` groups them in Lightning's loggers).

    """

    def __init__(
        self,
        lt: Looptrace,
        *,
        name: str = "train",
        log_every: int = 50,
        stats: Iterable[str] = DEFAULT_STATS,
        prefix: str = "timing",
        sep: str = "/",
    ) -> None:
        self.lt = lt
        self.timer = lt.timer(name)
        self.log_every = log_every
        self.stats = checked_stats(stats, "LooptraceCallback")
        self.prefix = prefix
        self.sep = sep
        self._batches = 0
        self.last: Snapshot | None = None

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Start the batch's lap (or end the `data` gap in it) with `forward`."""
        self._record("forward")

    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Any
    ) -> None:
        """Switch to `backward`."""
        self._record("backward")

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Switch to `after_backward`."""
        self._record("after_backward")

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        """Switch to `optimizer`."""
        self._record("optimizer")

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """End the lap; start the next one with `data` unless the epoch ends; log a window."""
        try:
            last = batch_idx + 1 >= trainer.num_training_batches or (
                trainer.max_steps >= 0 and trainer.global_step >= trainer.max_steps
            )
            if last:
                self.timer.stop()
            else:
                self.timer.record()
                self.timer.record("data")
            self._batches += 1
            if self.log_every and self._batches % self.log_every == 0:
                self.last = self.lt.reset()
                pl_module.log_dict(
                    flat_metrics(
                        self.last, prefix=self.prefix, stats_names=self.stats, sep=self.sep
                    )
                )
        except Exception:
            failed(self.lt, "LooptraceCallback.on_train_batch_end")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """End a lap still running (an epoch cut short)."""
        if self.timer.running:
            self.timer.stop()

    def _record(self, section: str) -> None:
        try:
            self.timer.record(section)
        except Exception:
            failed(self.lt, f"LooptraceCallback {section}")
