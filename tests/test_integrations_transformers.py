"""The Hugging Face Trainer on the CPU with a tiny BERT built from a config (no download)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from looptrace import Snapshot
from looptrace.testing import Capture, FakeClock

torch = pytest.importorskip("torch", reason="the Trainer needs torch (the transformers extra)")
transformers = pytest.importorskip("transformers", reason="the transformers extra is missing")
integration = pytest.importorskip("looptrace.integrations.transformers")

STEPS, ACCUMULATE, LOG_EVERY = 12, 2, 4
FORWARD_S = 0.01  # fake seconds of each micro-batch's forward pass


class Sentences(torch.utils.data.Dataset):  # type: ignore[misc]
    """Random token ids with binary labels."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> dict[str, Any]:
        generator = torch.Generator().manual_seed(index)
        return {
            "input_ids": torch.randint(0, 30, (8,), generator=generator),
            "labels": torch.tensor(index % 2),
        }


def _tiny_bert(clock: FakeClock) -> Any:
    config = transformers.BertConfig(
        vocab_size=30,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    model = transformers.BertForSequenceClassification(config)
    model.register_forward_pre_hook(lambda *_: clock.advance(FORWARD_S))
    return model


def _trainer(cap: Capture, tmp_path: Path, report_to: list[str]) -> Any:
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=STEPS,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=ACCUMULATE,
        logging_steps=LOG_EVERY,
        report_to=report_to,
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    return transformers.Trainer(model=_tiny_bert(cap.clock), args=args, train_dataset=Sentences())


def test_a_lap_per_optimizer_step_and_timing_in_the_log_history(
    cap: Capture, tmp_path: Path
) -> None:
    """max_steps=12, 2 micro-batches a step, 8 steps an epoch: a lap per step, timing logged.

    A step's lap ends after its `log`, so the window closed inside it holds the laps before.
    """
    trainer = _trainer(cap, tmp_path, report_to=[])
    callback = integration.LooptraceCallback(cap.lt, stats=("count", "total")).attach(trainer)
    assert trainer.callback_handler.callbacks[0] is callback
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in logs] == [4, 8, 12]
    for entry in logs:
        timing = {k: round(v, 9) for k, v in entry.items() if k.startswith("timing/")}
        laps = LOG_EVERY
        expected = {
            "timing/root/train/count": {4: 3, 8: 4, 12: 4}[entry["step"]],
            "timing/root/train/substep/count": laps * ACCUMULATE,
            "timing/root/train/optimizer/count": laps,
            "timing/root/train/scheduler/count": laps,
            "timing/root/train/data/count": laps,  # an epoch's first fetch too
        }
        if entry["step"] > LOG_EVERY:  # the previous window's `log` ended in this one
            expected["timing/root/train/log/count"] = 1
        assert {k: v for k, v in timing.items() if k.endswith("/count")} == expected
        assert timing["timing/root/train/substep/total"] == round(laps * ACCUMULATE * FORWARD_S, 9)
    assert cap.lt.health().internal_errors == 0


def test_attached_first_the_timing_reaches_the_report_to_logger(
    cap: Capture, tmp_path: Path
) -> None:
    """With `report_to=["tensorboard"]` the timing keys are in TensorBoard's event files."""
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    trainer = _trainer(cap, tmp_path, report_to=["tensorboard"])
    integration.LooptraceCallback(cap.lt, stats=("count",)).attach(trainer)
    trainer.train()
    (events,) = {path.parent for path in (tmp_path / "out").rglob("events.out.tfevents.*")}
    reader = event_accumulator.EventAccumulator(str(events))
    reader.Reload()
    tag = "train/timing/root/train/substep/count"
    assert tag in reader.Tags()["scalars"]
    assert [(e.step, e.value) for e in reader.Scalars(tag)] == [
        (4, LOG_EVERY * ACCUMULATE),
        (8, LOG_EVERY * ACCUMULATE),
        (12, LOG_EVERY * ACCUMULATE),
    ]


def test_passed_as_a_trainer_callback_the_report_to_logger_runs_first(
    cap: Capture, tmp_path: Path
) -> None:
    """`Trainer(callbacks=[...])` runs after `report_to`: TensorBoard misses the timing keys."""
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    args = _trainer(cap, tmp_path, report_to=["tensorboard"]).args
    callback = integration.LooptraceCallback(cap.lt, stats=("count",))
    trainer = transformers.Trainer(
        model=_tiny_bert(cap.clock), args=args, train_dataset=Sentences(), callbacks=[callback]
    )
    trainer.train()
    (events,) = {path.parent for path in (tmp_path / "out").rglob("events.out.tfevents.*")}
    reader = event_accumulator.EventAccumulator(str(events))
    reader.Reload()
    assert "train/loss" in reader.Tags()["scalars"]
    assert not [tag for tag in reader.Tags()["scalars"] if "timing" in tag]
    steps = [e["step"] for e in trainer.state.log_history if "timing/root/train/count" in e]
    assert steps == [4, 8, 12]


FETCH_S, EVAL_FETCH_S = 0.001, 0.1  # fake seconds to fetch a training / an evaluation item


class Timed(Sentences):
    """Sentences whose every fetch takes fake time; counts the fetches."""

    def __init__(self, clock: FakeClock, fetch_s: float, size: int = 64) -> None:
        self.clock, self.fetch_s, self.size, self.fetched = clock, fetch_s, size, 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        self.clock.advance(self.fetch_s)
        self.fetched += 1
        return super().__getitem__(index)


def test_evaluation_saving_and_logging_are_sections_of_their_own_not_data(
    cap: Capture, tmp_path: Path
) -> None:
    """Evaluation every 3 steps, a checkpoint every 6: `data` holds only the training fetches."""
    windows: list[Snapshot] = []
    cap.lt.on_reset(windows.append)
    train_set, eval_set = Timed(cap.clock, FETCH_S), Timed(cap.clock, EVAL_FETCH_S, size=8)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=STEPS,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=ACCUMULATE,
        logging_steps=LOG_EVERY,
        eval_strategy="steps",
        eval_steps=3,
        save_strategy="steps",
        save_steps=6,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = transformers.Trainer(
        model=_tiny_bert(cap.clock), args=args, train_dataset=train_set, eval_dataset=eval_set
    )
    integration.LooptraceCallback(cap.lt).attach(trainer)
    trainer.train()
    cap.lt.shutdown()
    counts: dict[str, int] = {}
    totals: dict[str, float] = {}
    for window in windows:
        for path, stats in window.items():
            counts[path] = counts.get(path, 0) + stats.count
            totals[path] = totals.get(path, 0.0) + stats.total
    evaluations = STEPS // 3
    assert {path: n for path, n in counts.items() if path.startswith("root.train")} == {
        "root.train": STEPS,
        "root.train.data": STEPS,
        "root.train.substep": STEPS * ACCUMULATE,
        "root.train.optimizer": STEPS,
        "root.train.scheduler": STEPS,
        "root.train.log": STEPS // LOG_EVERY,
        "root.train.evaluate": evaluations,
        "root.train.save": 2,
    }
    assert round(totals["root.train.data"], 9) == round(train_set.fetched * FETCH_S, 9)
    per_evaluation = len(eval_set) * EVAL_FETCH_S + 2 * FORWARD_S  # 2 batches of 4
    assert eval_set.fetched == evaluations * len(eval_set)
    assert round(totals["root.train.evaluate"], 9) == round(evaluations * per_evaluation, 9)
    sections = [t for path, t in totals.items() if path.count(".") == 2 and "train." in path]
    lap_self = sum(window["root.train"].self_time for window in windows if "root.train" in window)
    assert round(math.fsum(sections) + lap_self, 9) == round(totals["root.train"], 9)
    assert cap.lt.health().internal_errors == 0
