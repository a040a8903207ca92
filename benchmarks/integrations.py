"""Per-step overhead of each integration against the same loop without it, on the CPU.

Cases of one comparison run in one process, interleaved in random order each round, and the
table shows medians over rounds; read the differences and ratios, not the absolute times (the
development machine is shared and drifts). Times are the process's CPU time (torch on one
thread), which other processes on a busy machine disturb far less than wall time; the loggers'
are wall time, since W&B and MLflow work in other processes and threads. Needs the
`integrations` extra.

    python benchmarks/integrations.py                      # everything, table on stdout
    python benchmarks/integrations.py --only gate,lightning
    python benchmarks/integrations.py --baseline 2139cfe   # the range gate: this tree vs a commit

- gate: one `record()` section (aggregate only) with torch imported and no profiler running,
  in this tree and, with `--baseline REV`, in the source of that commit (subprocesses,
  alternating), so the cost of the profiler-range check is measured, not assumed.
- ranges: one section while a `torch.profiler.profile` records (a `record_function` range).
- lightning: a batch of a tiny model's `fit`, without looptrace, with `LooptraceProfiler`,
  with `LooptraceCallback`, and with Lightning's `SimpleProfiler` for reference.
- transformers: an optimizer step of a tiny BERT `Trainer`, with and without the callback.
- loggers: one `log_snapshot` call (a window of 6 sections) to TensorBoard, W&B offline and
  MLflow (a local file store): paid once per window, not per step.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECTION_LOOP = """
import sys, time
import torch
import looptrace
from opentelemetry.sdk.trace import TracerProvider
lt = looptrace.configure("bench", tracer_provider=TracerProvider(), trace_every=0)
train = lt.timer("train")
names = ("data", "forward", "backward", "optimizer") * 5
steps = int(sys.argv[1])
best = None
for _ in range(5):
    start = time.process_time_ns()
    for _ in range(steps):
        for name in names:
            train.record(name)
        train.record()
    lt.reset()
    cost = (time.process_time_ns() - start) / (steps * 21)
    best = cost if best is None else min(best, cost)
print(best)
"""


def median_of(rounds: int, cases: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Run every case once per round in random order; return each case's median."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        order = list(cases)
        random.shuffle(order)
        for name in order:
            samples[name].append(cases[name]())
    return {name: statistics.median(values) for name, values in samples.items()}


def gate(rounds: int, steps: int, baseline: str | None) -> dict[str, float]:
    """Nanoseconds per aggregated section, this tree and (optionally) a baseline commit."""
    sources = {"this tree": ROOT / "src"}
    keep = None
    if baseline:
        keep = tempfile.TemporaryDirectory()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", baseline, "src"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", keep.name], input=archive.stdout, check=True)
        sources[f"baseline {baseline}"] = Path(keep.name) / "src"

    def run(src: Path) -> Callable[[], float]:
        def once() -> float:
            env = {**os.environ, "PYTHONPATH": str(src)}
            done = subprocess.run(
                [sys.executable, "-c", SECTION_LOOP, str(steps)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            return float(done.stdout.strip().splitlines()[-1])

        return once

    result = median_of(rounds, {name: run(src) for name, src in sources.items()})
    if keep is not None:
        keep.cleanup()
    return {f"record() section, no profiler ({name}) [ns]": v for name, v in result.items()}


def ranges(rounds: int, steps: int) -> dict[str, float]:
    """Nanoseconds per section while a torch.profiler records, against no profiler."""
    import torch
    from opentelemetry.sdk.trace import TracerProvider

    import looptrace

    lt = looptrace.configure("bench", tracer_provider=TracerProvider(), trace_every=0)
    train = lt.timer("train")
    names = ("data", "forward", "backward", "optimizer") * 5

    def loop() -> float:
        start = time.process_time_ns()
        for _ in range(steps):
            for name in names:
                train.record(name)
            train.record()
        train.stop()
        return (time.process_time_ns() - start) / (steps * 21)

    def profiled() -> float:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            return loop()

    result = median_of(rounds, {"no profiler": loop, "torch.profiler recording": profiled})
    lt.shutdown()
    return {f"record() section, {name} [ns]": value for name, value in result.items()}


def lightning(rounds: int, batches: int) -> dict[str, float]:
    """Microseconds per training batch of a tiny model's fit, per profiler or callback."""
    import lightning as L  # noqa: N812  (Lightning's own convention)
    import torch
    from lightning.pytorch.profilers import Profiler, SimpleProfiler
    from opentelemetry.sdk.trace import TracerProvider

    import looptrace
    from looptrace.integrations.lightning import FETCH, LooptraceCallback, LooptraceProfiler

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    lt = looptrace.configure("bench", tracer_provider=TracerProvider(), trace_every=0)
    data = torch.utils.data.TensorDataset(torch.randn(batches, 8), torch.randn(batches, 1))

    class Tiny(L.LightningModule):  # type: ignore[misc]
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

    def fit(**extra: Any) -> Callable[[], float]:
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

    class Recorder(Profiler):  # type: ignore[misc]
        """Records the actions of one fit, to replay a batch's worth without Lightning."""

        def __init__(self) -> None:
            super().__init__()
            self.actions: list[tuple[bool, str]] = []

        def start(self, action_name: str) -> None:
            self.actions.append((True, action_name))

        def stop(self, action_name: str) -> None:
            self.actions.append((False, action_name))

    recorder = Recorder()
    fit(profiler=lambda: recorder)()
    fetches = [i for i, (up, a) in enumerate(recorder.actions) if up and a == FETCH]
    one_batch = recorder.actions[fetches[1] : fetches[2]]
    replays = 200

    def replay(make: Callable[[], Any]) -> Callable[[], float]:
        def once() -> float:
            profiler = make()
            start = time.process_time_ns()
            for _ in range(replays):
                for up, action in one_batch:
                    (profiler.start if up else profiler.stop)(action)
            return (time.process_time_ns() - start) / replays / 1000

        return once

    callback = LooptraceCallback(lt, log_every=0)
    state = SimpleNamespace(num_training_batches=10**9, max_steps=-1, global_step=0)

    def hooks() -> float:
        start = time.process_time_ns()
        for index in range(replays):
            callback.on_train_batch_start(state, None, None, index)
            callback.on_before_backward(state, None, None)
            callback.on_after_backward(state, None)
            callback.on_before_optimizer_step(state, None, None)
            callback.on_train_batch_end(state, None, None, None, index)
        return (time.process_time_ns() - start) / replays / 1000

    alone = median_of(
        rounds * 3,
        {
            f"LooptraceProfiler hooks alone ({len(one_batch)} calls)": replay(
                lambda: LooptraceProfiler(lt)
            ),
            f"SimpleProfiler hooks alone ({len(one_batch)} calls)": replay(SimpleProfiler),
            "LooptraceCallback hooks alone": hooks,
        },
    )
    callback.timer.stop()
    lt.reset()
    result = median_of(
        rounds,
        {
            "without looptrace": fit(),
            "LooptraceProfiler": fit(profiler=lambda: LooptraceProfiler(lt)),
            "LooptraceProfiler, keep=3 actions": fit(
                profiler=lambda: LooptraceProfiler(
                    lt,
                    keep=lambda a: a.endswith((".backward", ".optimizer_step", ".training_step")),
                )
            ),
            "LooptraceCallback": fit(callbacks=lambda: [LooptraceCallback(lt, log_every=0)]),
            "SimpleProfiler (Lightning's)": fit(
                profiler=lambda: SimpleProfiler(dirpath=tempfile.mkdtemp(), filename="simple")
            ),
        },
    )
    lt.shutdown()
    result.update(alone)
    return {f"Lightning batch, {name} [µs]": value for name, value in result.items()}


def transformers_steps(rounds: int, steps: int) -> dict[str, float]:
    """Microseconds per optimizer step of a tiny BERT Trainer, with and without the callback."""
    import torch
    import transformers
    from opentelemetry.sdk.trace import TracerProvider

    import looptrace
    from looptrace.integrations.transformers import LooptraceCallback

    transformers.logging.set_verbosity_error()
    lt = looptrace.configure("bench", tracer_provider=TracerProvider(), trace_every=0)
    config = transformers.BertConfig(
        vocab_size=30,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    items = [
        {"input_ids": torch.randint(0, 30, (8,)), "labels": torch.tensor(i % 2)}
        for i in range(steps * 2)
    ]

    class TrainerStopwatch(transformers.TrainerCallback):  # type: ignore[misc]
        """Times from the first step's start to the last step's end, not the setup."""

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step == 0:
                self.start = time.process_time_ns()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.ns = time.process_time_ns() - self.start

    def train(with_callback: bool) -> Callable[[], float]:
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

    callback = LooptraceCallback(lt)
    state = SimpleNamespace(epoch=0.5, max_steps=10**9, global_step=1)
    replays = 200

    def hooks() -> float:
        start = time.process_time_ns()
        for _ in range(replays):
            callback.on_step_begin(None, state, None)
            callback.on_pre_optimizer_step(None, state, None)
            callback.on_optimizer_step(None, state, None)
            callback.on_step_end(None, state, None)
        return (time.process_time_ns() - start) / replays / 1000

    alone = median_of(rounds * 3, {"LooptraceCallback hooks alone": hooks})
    callback.timer.stop()
    lt.reset()
    result = median_of(
        rounds, {"without looptrace": train(False), "LooptraceCallback": train(True)}
    )
    result.update(alone)
    lt.shutdown()
    return {f"Trainer step, {name} [µs]": value for name, value in result.items()}


def loggers(rounds: int, calls: int) -> dict[str, float]:
    """Microseconds per `log_snapshot` call of each logger, for a window of 6 sections."""
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    import mlflow
    import wandb
    from opentelemetry.sdk.trace import TracerProvider
    from torch.utils.tensorboard import SummaryWriter

    import looptrace
    from looptrace.integrations import mlflow as lt_mlflow
    from looptrace.integrations import tensorboard as lt_tensorboard
    from looptrace.integrations import wandb as lt_wandb

    lt = looptrace.configure("bench", tracer_provider=TracerProvider(), trace_every=0)
    train = lt.timer("train")
    for _ in range(100):
        for name in ("data", "forward", "backward", "optimizer"):
            train.record(name)
        with train.section("log"):
            pass
        train.record()
    train.stop()
    snapshot = lt.reset()
    work = Path(tempfile.mkdtemp())
    writer = SummaryWriter(log_dir=str(work / "tb"))
    run = wandb.init(project="bench", dir=str(work))
    mlflow.set_tracking_uri((work / "mlruns").as_uri())
    mlflow.start_run()
    step = [0]

    def timed(call: Callable[[int], object]) -> Callable[[], float]:
        def once() -> float:
            start = time.perf_counter_ns()
            for _ in range(calls):
                step[0] += 1
                call(step[0])
            return (time.perf_counter_ns() - start) / calls / 1000

        return once

    result = median_of(
        rounds,
        {
            "TensorBoard (scalars and histograms)": timed(
                lambda s: lt_tensorboard.log_snapshot(writer, snapshot, step=s)
            ),
            "W&B offline": timed(lambda s: lt_wandb.log_snapshot(snapshot, step=s, run=run)),
            "MLflow (local file store)": timed(lambda s: lt_mlflow.log_snapshot(snapshot, step=s)),
        },
    )
    writer.close()
    run.finish()
    mlflow.end_run()
    lt.shutdown()
    return {f"log_snapshot, {name} [µs per window]": value for name, value in result.items()}


def main(argv: list[str] | None = None) -> int:
    """Run the chosen comparisons and print one line per case."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="gate,ranges,lightning,transformers,loggers")
    parser.add_argument("--baseline", help="a commit whose source the gate case compares with")
    parser.add_argument("--quick", action="store_true", help="few rounds, small loops")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--rounds", type=int, help="rounds per comparison (default 5-9)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    try:
        import torch

        torch.set_num_threads(1)  # steadier on a shared machine; the same for every case
    except ImportError:
        pass
    quick = args.quick

    def rounds(full: int) -> int:
        return args.rounds or (2 if quick else full)

    runs: dict[str, Callable[[], dict[str, float]]] = {
        "gate": lambda: gate(rounds(9), 500 if quick else 4000, args.baseline),
        "ranges": lambda: ranges(rounds(7), 200 if quick else 2000),
        "lightning": lambda: lightning(rounds(5), 50 if quick else 300),
        "transformers": lambda: transformers_steps(rounds(5), 10 if quick else 60),
        "loggers": lambda: loggers(rounds(5), 5 if quick else 30),
    }
    results: dict[str, float] = {}
    for name in args.only.split(","):
        found = runs[name]()
        for case, value in found.items():
            print(f"{case:70s} {value:10.2f}", flush=True)
        results.update(found)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
