"""A Lightning batch in benchmarks/integrations.py, per looptrace profiler or callback."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import lightning as L  # noqa: N812  (Lightning's own convention)
import torch
from integrations_rounds import median_of
from lightning.pytorch.profilers import Profiler, SimpleProfiler
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace.integrations.lightning import FETCH, LooptraceCallback, LooptraceProfiler

REPLAYS = 200
Actions = list[tuple[bool, str]]


class Tiny(L.LightningModule):  # type: ignore[misc]
    """One linear layer: the batch costs little beside the framework's own work."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Stopwatch(L.Callback):  # type: ignore[misc]
    """Times the epoch's batches only, not the fit's setup and teardown."""

    def on_train_batch_start(self, *args: Any) -> None:
        if args[-1] == 0:
            self.start = time.process_time_ns()

    def on_train_epoch_end(self, *args: Any) -> None:
        self.ns = time.process_time_ns() - self.start


class Recorder(Profiler):  # type: ignore[misc]
    """Records the actions of one fit, to replay a batch's worth without Lightning."""

    def __init__(self) -> None:
        super().__init__()
        self.actions: Actions = []

    def start(self, action_name: str) -> None:
        self.actions.append((True, action_name))

    def stop(self, action_name: str) -> None:
        self.actions.append((False, action_name))


def fitting(lt: looptrace.Looptrace, data: Any, **extra: Any) -> Callable[[], float]:
    """Return a fit of one epoch over `data` that answers microseconds per batch.

    `extra` holds Trainer arguments made afresh for each fit (a profiler, callbacks).
    """
    batches = len(data)

    def once() -> float:
        made = {key: make() for key, make in extra.items()}
        stopwatch = Stopwatch()
        made["callbacks"] = [stopwatch, *made.get("callbacks", [])]
        trainer = L.Trainer(
            max_epochs=1,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            **made,
        )
        loader = torch.utils.data.DataLoader(data, batch_size=1)
        trainer.fit(Tiny(), loader)
        lt.reset()
        return stopwatch.ns / (batches - 1) / 1000

    return once


def one_batch_of_actions(lt: looptrace.Looptrace, data: Any) -> Actions:
    """Return the profiler actions of the second batch of a recorded fit."""
    recorder = Recorder()
    fitting(lt, data, profiler=lambda: recorder)()
    fetches = [i for i, (up, a) in enumerate(recorder.actions) if up and a == FETCH]
    return recorder.actions[fetches[1] : fetches[2]]


def replayed(actions: Actions, make: Callable[[], Any]) -> Callable[[], float]:
    """Return a replay of `actions` on a fresh profiler that answers microseconds per batch."""

    def once() -> float:
        profiler = make()
        start = time.process_time_ns()
        for _ in range(REPLAYS):
            for up, action in actions:
                (profiler.start if up else profiler.stop)(action)
        return (time.process_time_ns() - start) / REPLAYS / 1000

    return once


def callback_hooks(callback: LooptraceCallback) -> Callable[[], float]:
    """Return a replay of one batch's callback hooks that answers microseconds per batch."""
    state = SimpleNamespace(num_training_batches=10**9, max_steps=-1, global_step=0)

    def hooks() -> float:
        start = time.process_time_ns()
        for index in range(REPLAYS):
            callback.on_train_batch_start(state, None, None, index)
            callback.on_before_backward(state, None, None)
            callback.on_after_backward(state, None)
            callback.on_before_optimizer_step(state, None, None)
            callback.on_train_batch_end(state, None, None, None, index)
        return (time.process_time_ns() - start) / REPLAYS / 1000

    return hooks


def hooks_alone(lt: looptrace.Looptrace, data: Any, rounds: int) -> dict[str, float]:
    """Microseconds per batch of the profilers' and the callback's hooks, without Lightning."""
    actions = one_batch_of_actions(lt, data)
    callback = LooptraceCallback(lt, log_every=0)
    alone = median_of(
        rounds * 3,
        {
            f"LooptraceProfiler hooks alone ({len(actions)} calls)": replayed(
                actions, lambda: LooptraceProfiler(lt)
            ),
            f"SimpleProfiler hooks alone ({len(actions)} calls)": replayed(actions, SimpleProfiler),
            "LooptraceCallback hooks alone": callback_hooks(callback),
        },
    )
    callback.timer.stop()
    lt.reset()
    return alone


def lightning(rounds: int, batches: int) -> dict[str, float]:
    """Microseconds per training batch of a tiny model's fit, per profiler or callback."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    lt = looptrace.configure("bench", tracer_provider=TracerProvider(), trace_every=0)
    data = torch.utils.data.TensorDataset(torch.randn(batches, 8), torch.randn(batches, 1))
    alone = hooks_alone(lt, data, rounds)
    result = median_of(
        rounds,
        {
            "without looptrace": fitting(lt, data),
            "LooptraceProfiler": fitting(lt, data, profiler=lambda: LooptraceProfiler(lt)),
            "LooptraceProfiler, keep=3 actions": fitting(
                lt,
                data,
                profiler=lambda: LooptraceProfiler(
                    lt,
                    keep=lambda a: a.endswith((".backward", ".optimizer_step", ".training_step")),
                ),
            ),
            "LooptraceCallback": fitting(
                lt, data, callbacks=lambda: [LooptraceCallback(lt, log_every=0)]
            ),
            "SimpleProfiler (Lightning's)": fitting(
                lt,
                data,
                profiler=lambda: SimpleProfiler(dirpath=tempfile.mkdtemp(), filename="simple"),
            ),
        },
    )
    lt.shutdown()
    result.update(alone)
    return {f"Lightning batch, {name} [µs]": value for name, value in result.items()}
