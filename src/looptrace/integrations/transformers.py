"""Hugging Face `Trainer`: a lap per optimizer step, and timing statistics in the Trainer's logs.

`LooptraceCallback` is a `TrainerCallback`. Attach it with `callback.attach(trainer)` (or
`Trainer(callbacks=[...])`): its statistics go into the `logs` of every training log, so they
reach `trainer.state.log_history` and, when it runs before them, the `report_to` loggers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from looptrace._looptrace import Looptrace
from looptrace._stats.snapshot import Snapshot
from looptrace.integrations._common import DEFAULT_STATS, checked_stats, failed, flat_metrics

__all__ = ["LooptraceCallback"]


# What the Trainer may do after a step (or an epoch), in its order, and the flag announcing it.
_AFTER_STEP = (("log", "should_log"), ("evaluate", "should_evaluate"), ("save", "should_save"))


class LooptraceCallback(TrainerCallback):
    """Times the Trainer's optimizer steps as laps and adds their statistics to its logs.

    The timer `root.<name>` laps once per optimizer step: `data` for fetching its batches
    (the first of an epoch includes starting the DataLoader's iterator and workers), `substep`
    for each micro-batch's forward and backward (counted `gradient_accumulation_steps` times
    per step), `optimizer` for the optimizer step, `scheduler` for the learning-rate step and
    zeroing gradients, then what the Trainer does after the step when it does it: `log`
    (gathering the loss and every logger's `on_log`), `evaluate` (the whole evaluation, up to
    the `on_evaluate` callbacks) and `save` (the checkpoint, up to the `on_save` callbacks);
    after an epoch's last step these also hold the epoch's evaluation and saving. The next
    lap starts when they are done, with its `data`. At every training log it closes a window
    with `lt.reset()` and adds the chosen statistics to the `logs`, keys like
    `timing/root/train/substep/mean` (the window closes inside `log`, which ends in the next).

    The Trainer runs its `report_to` callbacks before the ones passed to it, so those loggers
    would see the `logs` before the timing is added: `attach(trainer)` puts this callback first
    (and a small companion last, to see where the loggers' work ends).

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
        self._tail: _Tail | None = None  # set by attach(): sees the step's flags and the loggers
        self._section: str | None = None  # the section of the lap now running
        self._after: list[str] = []  # what the Trainer does next after the step, in order
        self._phase = False  # between a step's end and the next lap
        self._epoch_end = False  # the step ended its epoch: the epoch's own work comes next
        self._ending = False  # the step was the last of training

    def attach(self, trainer: Trainer) -> LooptraceCallback:
        """Make this the Trainer's first callback, so `report_to` loggers see the timing keys."""
        callbacks = trainer.callback_handler.callbacks
        if self in callbacks:
            callbacks.remove(self)
        callbacks.insert(0, self)
        if self._tail is None:
            self._tail = _Tail(self._step_ended, self._done, self._epoch_ended)
        if self._tail not in callbacks:
            callbacks.append(self._tail)
        return self

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """Start a lap with `data` (the epoch's first fetch) unless one runs."""
        try:
            if not self.timer.running:
                self._record("data")
        except Exception:
            failed(self.lt, "LooptraceCallback.on_epoch_begin")

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """End `data` (or start the step's lap) with the first `substep`."""
        if self._phase:  # what the Trainer announced never came: the lap ends here
            self._phase = self._epoch_end = self._ending = False
            self._after.clear()
            self._lap()
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
        """Start what the Trainer announced for after the step (else the next lap)."""
        if self._tail is None:  # after the Trainer's flow callback: its flags are set
            self._step_ended(state, control)

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
        if self._tail is None:
            self._done("log")

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """End `evaluate` (when this callback comes last)."""
        if self._tail is None:
            self._done("evaluate")

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """End `save` (when this callback comes last)."""
        if self._tail is None:
            self._done("save")

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """Start the epoch's own logging, evaluation and saving (when this callback comes last)."""
        if self._tail is None:
            self._epoch_ended(control)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """End a lap still running."""
        self._phase = self._epoch_end = self._ending = False
        self._after.clear()
        self._stop()

    def _step_ended(self, state: TrainerState, control: TrainerControl) -> None:
        try:
            # `state.epoch` is the epoch index plus the fraction done: whole after its last step.
            self._epoch_end = state.epoch is not None and float(state.epoch).is_integer()
            self._ending = bool(control.should_training_stop) or (
                state.max_steps > 0 and state.global_step >= state.max_steps
            )
            self._after = [name for name, flag in _AFTER_STEP if getattr(control, flag, False)]
            self._phase = True
            self._next()
        except Exception:
            failed(self.lt, "LooptraceCallback.on_step_end")

    def _epoch_ended(self, control: TrainerControl) -> None:
        try:
            if self._phase and self._epoch_end and not self._after:
                self._epoch_end = False
                self._after = [name for name, flag in _AFTER_STEP if getattr(control, flag, False)]
                self._next()
            elif self.timer.running and not self._phase:
                self._stop()  # an epoch cut short (`should_epoch_stop`)
        except Exception:
            failed(self.lt, "LooptraceCallback.on_epoch_end")

    def _done(self, name: str) -> None:
        """Start what follows `name` (and anything announced before it): the Trainer finished it."""
        try:
            after = self._after
            if self._phase and name in after:
                del after[: after.index(name) + 1]
                self._next()
        except Exception:
            failed(self.lt, f"LooptraceCallback after {name}")

    def _next(self) -> None:
        """Start what comes next after the step (`_after[0]`), or end the step's lap."""
        if self._after:
            self._record(self._after[0])
            return
        self._end_section()
        if self._epoch_end:
            return  # the epoch's own work is announced at its end
        self._phase = self._epoch_end = False
        if self._ending:
            self._stop()
        else:
            self._lap()
            self._record("data")

    def _record(self, section: str) -> None:
        try:
            self.timer.record(section)
            self._section = section
        except Exception:
            failed(self.lt, f"LooptraceCallback {section}")

    def _end_section(self) -> None:
        if self._section is not None:
            running = self.timer.timer(self._section)
            self._section = None
            if running.running:
                running.stop()

    def _lap(self) -> None:
        self._section = None
        if self.timer.running:
            self.timer.record()

    def _stop(self) -> None:
        try:
            self._section = None
            if self.timer.running:
                self.timer.stop()
        except Exception:
            failed(self.lt, "LooptraceCallback stop")


class _Tail(TrainerCallback):
    """The last callback: the Trainer's flags are set, and the loggers have run, by its turn."""

    def __init__(
        self,
        step_ended: Callable[[TrainerState, TrainerControl], None],
        done: Callable[[str], None],
        epoch_ended: Callable[[TrainerControl], None],
    ) -> None:
        self.step_ended = step_ended
        self.done = done
        self.epoch_ended = epoch_ended

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """Start what the Trainer announced for after the step."""
        self.step_ended(state, control)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kw: Any,
    ) -> None:
        """End `log` once every logger has seen a training log."""
        if logs is not None and "loss" in logs:
            self.done("log")

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """End `evaluate`."""
        self.done("evaluate")

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """End `save`."""
        self.done("save")

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """Start the epoch's own logging, evaluation and saving."""
        self.epoch_ended(control)
