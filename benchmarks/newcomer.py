"""A newcomer's first runs, checked for numbers that add up: the summary against a stopwatch.

Four loops a new user writes first, each timed by looptrace and by `time.perf_counter` around
it: a `for ... break` out of `train.iterate(...)`, a DataLoader with two workers (its first
`iter()` starts them), a Hugging Face `Trainer` evaluating every 30 steps, and Lightning with
looptrace's profiler at its defaults. For each it prints `looptrace summary` of the run's
snapshot file and the sums: laps against the stopwatch, sections plus self time against the
laps. Needs the `integrations` extra (torch, transformers, lightning); runs on the CPU.

    python benchmarks/newcomer.py [--steps 120]
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

import looptrace


@contextmanager
def stopwatch(into: dict[str, float]) -> Iterator[None]:
    """Put the wall time of the block, in seconds, into `into["wall_s"]`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        into["wall_s"] = time.perf_counter() - start


def break_loop(lt: looptrace.Looptrace, steps: int, into: dict[str, float]) -> None:
    """`for step, batch in enumerate(train.iterate(...))`, leaving with `break`."""
    train = lt.timer("train")
    model = torch.nn.Linear(64, 64)
    data = [torch.randn(32, 64) for _ in range(steps * 2)]
    with stopwatch(into):
        for step, batch in enumerate(train.iterate(data)):
            train.record("forward")
            loss = model(batch).square().mean()
            train.record("backward")
            loss.backward()
            if step >= steps - 1:
                break
    into["running_after_break"] = float(train.running)


class Squares(torch.utils.data.Dataset[torch.Tensor]):
    """A dataset whose items cost a little to make, as decoding does."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((64,), float(index)).sqrt()


def loader_workers(lt: looptrace.Looptrace, steps: int, into: dict[str, float]) -> None:
    """A DataLoader with two worker processes: the first fetch starts them."""
    train = lt.timer("train")
    model = torch.nn.Linear(64, 1)
    loader = torch.utils.data.DataLoader(Squares(), batch_size=16, num_workers=2)
    with stopwatch(into):
        for step, batch in enumerate(train.iterate(loader)):
            train.record("step")
            model(batch).mean().backward()
            if step >= steps - 1:
                break


def hugging_face(lt: looptrace.Looptrace, steps: int, into: dict[str, float]) -> None:
    """A tiny BERT `Trainer` evaluating every 30 steps, with looptrace's callback."""
    import transformers

    from looptrace.integrations.transformers import LooptraceCallback

    config = transformers.BertConfig(
        vocab_size=30,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    items = [{"input_ids": [1, 2, 3, 4, 5, 6], "labels": 1} for _ in range(64)]
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=2,
            eval_strategy="steps",
            eval_steps=30,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
        )
        trainer = transformers.Trainer(
            model=transformers.BertForSequenceClassification(config),
            args=args,
            train_dataset=items,
            eval_dataset=items,
        )
        LooptraceCallback(lt).attach(trainer)
        with stopwatch(into):
            trainer.train()


def lightning(lt: looptrace.Looptrace, steps: int, into: dict[str, float]) -> None:
    """Lightning `fit` with `LooptraceProfiler(lt)` at its defaults, validating each epoch."""
    import lightning as L  # noqa: N812  (Lightning's own convention)

    from looptrace.integrations.lightning import LooptraceProfiler

    class Tiny(L.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def validation_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.TensorDataset(torch.randn(steps * 8, 8), torch.randn(steps * 8, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    with tempfile.TemporaryDirectory() as out:
        trainer = L.Trainer(
            max_epochs=2,
            limit_train_batches=steps // 2,
            limit_val_batches=5,
            profiler=LooptraceProfiler(lt),
            default_root_dir=out,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator="cpu",
        )
        with stopwatch(into):
            trainer.fit(Tiny(), loader, loader)


SCENARIOS: dict[str, tuple[str, Callable[[looptrace.Looptrace, int, dict[str, float]], None]]] = {
    "for ... break": ("root.train", break_loop),
    "DataLoader, 2 workers": ("root.train", loader_workers),
    "Hugging Face, eval every 30": ("root.train", hugging_face),
    "Lightning profiler": ("root.lightning", lightning),
}


def sums(snapshot_file: Path, lap_path: str) -> dict[str, float]:
    """Return the laps' total and count, and their sections' totals plus self time."""
    laps = sections = self_time = 0.0
    count = 0
    for line in snapshot_file.read_text().splitlines():
        stats = json.loads(line)["stats"]
        lap = stats.get(lap_path)
        if lap is None:
            continue
        laps += lap["total"]
        count += lap["count"]
        self_time += lap["self_time"]
        prefix = f"{lap_path}."
        sections += sum(
            value["total"]
            for path, value in stats.items()
            if path.startswith(prefix) and "." not in path[len(prefix) :]
        )
    return {"laps_s": laps, "laps": count, "sections_s": sections, "self_s": self_time}


def run(name: str, steps: int, directory: Path) -> dict[str, float]:
    """Run one scenario into `directory`; print its summary and return its sums."""
    lap_path, scenario = SCENARIOS[name]
    snapshot_file = directory / "snapshots.jsonl"
    lt = looptrace.configure(snapshot_file=snapshot_file, trace_every=0)
    found: dict[str, float] = {}
    scenario(lt, steps, found)
    lt.shutdown()
    summary = subprocess.run(
        [sys.executable, "-m", "looptrace", "summary", str(snapshot_file)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    print(f"\n## {name}\n\n{summary.rstrip()}\n")
    found.update(sums(snapshot_file, lap_path))
    return found


def main(argv: list[str] | None = None) -> int:
    """Run every scenario and print what adds up to what."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--only", help="comma-separated scenario numbers, 1-4")
    arguments = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    chosen = list(SCENARIOS)
    if arguments.only:
        chosen = [chosen[int(n) - 1] for n in arguments.only.split(",")]
    rows = []
    for name in chosen:
        with tempfile.TemporaryDirectory() as directory:
            rows.append((name, run(name, arguments.steps, Path(directory))))
    print(
        f"{'scenario':30} {'laps':>5} {'wall s':>8} {'laps s':>8} {'laps/wall':>9}"
        f" {'sections+self s':>15} {'/laps':>6}"
    )
    for name, found in rows:
        added = found["sections_s"] + found["self_s"]
        print(
            f"{name:30} {found['laps']:5.0f} {found['wall_s']:8.3f} {found['laps_s']:8.3f}"
            f" {found['laps_s'] / found['wall_s']:9.3f} {added:15.3f}"
            f" {added / found['laps_s']:6.3f}"
        )
        if "running_after_break" in found:
            print(f"{'':30} the timer after `break`: running={bool(found['running_after_break'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
