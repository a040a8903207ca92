"""The Hugging Face Trainer on the CPU with a tiny BERT built from a config (no download)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
    """max_steps=12, 2 micro-batches a step, 8 steps an epoch: a lap per step, timing logged."""
    trainer = _trainer(cap, tmp_path, report_to=[])
    callback = integration.LooptraceCallback(cap.lt, stats=("count", "total")).attach(trainer)
    assert trainer.callback_handler.callbacks[0] is callback
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in logs] == [4, 8, 12]
    for entry in logs:
        timing = {k: round(v, 9) for k, v in entry.items() if k.startswith("timing/")}
        laps = LOG_EVERY
        assert {k: v for k, v in timing.items() if k.endswith("/count")} == {
            "timing/root/train/count": laps,
            "timing/root/train/substep/count": laps * ACCUMULATE,
            "timing/root/train/optimizer/count": laps,
            "timing/root/train/scheduler/count": laps,
            # Each window's last gap ends in the next window; an epoch's first step has none.
            "timing/root/train/data/count": {4: 3, 8: 4, 12: 3}[entry["step"]],
        }
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
