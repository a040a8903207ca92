"""A Transformers `Trainer` step in benchmarks/integrations.py, with and without the callback."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import transformers
from integrations_rounds import median_of
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace.integrations.transformers import LooptraceCallback

REPLAYS = 200


class TrainerStopwatch(transformers.TrainerCallback):  # type: ignore[misc]
    """Times from the first step's start to the last step's end, not the setup."""

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step == 0:
            self.start = time.process_time_ns()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.ns = time.process_time_ns() - self.start


def tiny_bert() -> transformers.BertConfig:
    """Return the configuration of a BERT small enough to train a step in milliseconds."""
    return transformers.BertConfig(
        vocab_size=30,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )


def trainer_steps(
    lt: looptrace.Looptrace, steps: int, items: list[dict[str, Any]], *, with_callback: bool
) -> Callable[[], float]:
    """Return a run of `steps` Trainer steps over `items` that answers microseconds per step."""
    config = tiny_bert()

    def once() -> float:
        with tempfile.TemporaryDirectory() as out:
            args = transformers.TrainingArguments(
                output_dir=out,
                max_steps=steps,
                per_device_train_batch_size=2,
                logging_steps=20,
                report_to=[],
                save_strategy="no",
                use_cpu=True,
                disable_tqdm=True,
            )
            trainer = transformers.Trainer(
                model=transformers.BertForSequenceClassification(config),
                args=args,
                train_dataset=items,
            )
            stopwatch = TrainerStopwatch()
            trainer.add_callback(stopwatch)
            if with_callback:
                LooptraceCallback(lt).attach(trainer)
            trainer.train()
            return stopwatch.ns / (steps - 1) / 1000

    return once


def callback_hooks(callback: LooptraceCallback) -> Callable[[], float]:
    """Return a replay of one step's callback hooks that answers microseconds per step."""
    state = SimpleNamespace(epoch=0.5, max_steps=10**9, global_step=1)

    def hooks() -> float:
        start = time.process_time_ns()
        for _ in range(REPLAYS):
            callback.on_step_begin(None, state, None)
            callback.on_pre_optimizer_step(None, state, None)
            callback.on_optimizer_step(None, state, None)
            callback.on_step_end(None, state, None)
        return (time.process_time_ns() - start) / REPLAYS / 1000

    return hooks


def transformers_steps(rounds: int, steps: int) -> dict[str, float]:
    """Microseconds per optimizer step of a tiny BERT Trainer, with and without the callback."""
    transformers.logging.set_verbosity_error()
    lt = looptrace.configure("bench", tracer_provider=TracerProvider(), trace_every=0)
    items = [
        {"input_ids": torch.randint(0, 30, (8,)), "labels": torch.tensor(i % 2)}
        for i in range(steps * 2)
    ]
    callback = LooptraceCallback(lt)
    alone = median_of(rounds * 3, {"LooptraceCallback hooks alone": callback_hooks(callback)})
    callback.timer.stop()
    lt.reset()
    result = median_of(
        rounds,
        {
            "without looptrace": trainer_steps(lt, steps, items, with_callback=False),
            "LooptraceCallback": trainer_steps(lt, steps, items, with_callback=True),
        },
    )
    result.update(alone)
    lt.shutdown()
    return {f"Trainer step, {name} [µs]": value for name, value in result.items()}
