"""Hugging Face `Trainer`: a lap per optimizer step, and timing statistics in the Trainer's logs.

`LooptraceCallback` is a `TrainerCallback`. Attach it with `callback.attach(trainer)` (or
`Trainer(callbacks=[...])`): its statistics go into the `logs` of every training log, so they
reach `trainer.state.log_history` and, when it runs before them, the `report_to` loggers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from looptrace._looptrace import Looptrace
from looptrace._stats.snapshot import Snapshot
from looptrace.integrations._common import DEFAULT_STATS, checked_stats, failed, flat_metrics

__all__ = ["LooptraceCallback"]


class LooptraceCallback(TrainerCallback):
    """Times the Trainer's optimizer steps as laps and adds their statistics to its logs.

    The timer `root.<name>` laps once per optimizer step: `substep` for each micro-batch's
    forward and backward (counted `gradient_accumulation_steps` times per step), `optimizer`
    for the optimizer step, `scheduler` for the learning-rate step and zeroing gradients, and
    `data` for the gap before the next step of the epoch (the Trainer's logging, evaluation and
    saving after a step, and fetching the next batches). At every training log it closes a
    window with `lt.reset()` and adds the chosen statistics to the `logs`, keys like
    `timing/root/train/substep/mean`.

    The Trainer runs its `report_to` callbacks before the ones passed to it, so those loggers
    would see the `logs` before the timing is added: `attach(trainer)` puts this callback first.

    Args:
        lt: the configured looptrace.
        name: the lap timer's name (`root.train`).
        stats: the statistics logged per section.
        prefix: the first part of every key.
        sep: separates the parts of a key.

    """

    def __init__(
        self,
        lt: Looptrace,
        *,
        name: str = "train",
        stats: Iterable[str] = DEFAULT_STATS,
        prefix: str = "timing",
        sep: str = "/",
    ) -> None:
        self.lt = lt
        self.timer = lt.timer(name)
        self.stats = checked_stats(stats, "LooptraceCallback")
        self.prefix = prefix
        self.sep = sep
        self.last: Snapshot | None = None

    def attach(self, trainer: Trainer) -> LooptraceCallback:
        """Make this the Trainer's first callback, so `report_to` loggers see the timing keys."""
        callbacks = trainer.callback_handler.callbacks
        if self in callbacks:
            callbacks.remove(self)
        callbacks.insert(0, self)
        return self

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """Start the step's lap (or end the `data` gap in it) with the first `substep`."""
        self._record("substep")

    def on_substep_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """Start the next micro-batch's `substep`."""
        self._record("substep")

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """Switch to `optimizer`."""
        self._record("optimizer")

    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """Switch to `scheduler`."""
        self._record("scheduler")

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """End the lap; the next one starts with `data` unless the epoch or training ends."""
        try:
            # `state.epoch` is the epoch index plus the fraction done: whole after its last step.
            epoch_done = state.epoch is not None and float(state.epoch).is_integer()
            if epoch_done or (state.max_steps > 0 and state.global_step >= state.max_steps):
                self.timer.stop()
            else:
                self.timer.record()
                self.timer.record("data")
        except Exception:
            failed(self.lt, "LooptraceCallback.on_step_end")

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """End a lap still running at the end of an epoch (its `data` gap)."""
        self._stop()

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """End a lap still running."""
        self._stop()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kw: Any,
    ) -> None:
        """Close a window and add its statistics to a training log (one with a `loss`)."""
        if logs is None or "loss" not in logs:
            return
        try:
            self.last = self.lt.reset()
            timing = flat_metrics(
                self.last, prefix=self.prefix, stats_names=self.stats, sep=self.sep
            )
            logs.update(timing)
            # The Trainer appended a copy of these logs to the history just before this call.
            history = state.log_history
            if history and all(
                history[-1].get(key) == logs[key] for key in ("loss", "step") if key in logs
            ):
                history[-1].update(timing)
        except Exception:
            failed(self.lt, "LooptraceCallback.on_log")

    def _record(self, section: str) -> None:
        try:
            self.timer.record(section)
        except Exception:
            failed(self.lt, f"LooptraceCallback {section}")

    def _stop(self) -> None:
        try:
            if self.timer.running:
                self.timer.stop()
        except Exception:
            failed(self.lt, "LooptraceCallback stop")
