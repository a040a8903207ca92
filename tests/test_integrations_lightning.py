"""Lightning on the CPU: the profiler's actions as sections, and the callback's laps."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest

from looptrace import Snapshot
from looptrace._offline.plot_data import choose_timer
from looptrace.testing import Capture, FakeClock

torch = pytest.importorskip("torch", reason="Lightning needs torch (the lightning extra)")
L = pytest.importorskip("lightning", reason="the lightning extra is not installed")
integration = pytest.importorskip("looptrace.integrations.lightning")

from .helpers.lightning import (  # noqa: E402
    BACKWARD_S,
    BATCHES,
    EPOCHS,
    FETCH_S,
    OPTIMIZER_S,
    STEP,
    STEP_S,
    Items,
    Tiny,
    everything,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated"),
    pytest.mark.filterwarnings("ignore:The '\\w+' does not have many workers"),
]


def _fit(clock: FakeClock, **trainer_args: Any) -> Any:
    loader = torch.utils.data.DataLoader(Items(clock), batch_size=1)
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **trainer_args,
    )
    trainer.fit(Tiny(clock), loader)
    return trainer


@pytest.fixture(autouse=True)
def _quiet_lightning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lightning")


MODULE = "[LightningModule]Tiny"
STRATEGY = "[Strategy]SingleDeviceStrategy"
BATCH = "root.lightning.run_training_batch"
OPTIMIZER = f"{BATCH}.{MODULE}:optimizer_step"


def test_profiler_times_each_batch_as_a_lap_with_backward_and_optimizer(cap: Capture) -> None:
    """2 epochs of 10 batches: 20 laps, a section counted 20 times, and times that add up."""
    profiler = integration.LooptraceProfiler(cap.lt, keep=everything)
    windows: list[Snapshot] = []
    cap.lt.on_reset(windows.append)
    _fit(cap.clock, profiler=profiler)
    (snapshot,) = windows  # summary() closed one window at the end of fit
    n = BATCHES * EPOCHS
    counts = {path: stats.count for path, stats in snapshot.items()}
    assert counts["root.lightning"] == n
    assert counts[BATCH] == n
    assert counts["root.lightning.[_TrainingEpochLoop]:train_dataloader_next"] == n
    assert counts[OPTIMIZER] == n
    assert counts[f"{OPTIMIZER}.{STRATEGY}:training_step"] == n
    assert counts[f"{OPTIMIZER}.{STRATEGY}:backward"] == n
    assert counts["root.lightning_fit.run_training_epoch"] == EPOCHS
    assert counts["root.lightning_fit"] == 1

    def total(path: str) -> float:
        return round(snapshot[path].total, 9)

    assert total(f"{OPTIMIZER}.{STRATEGY}:backward") == round(n * BACKWARD_S, 9)
    assert total(f"{OPTIMIZER}.{STRATEGY}:training_step") == round(n * STEP_S, 9)
    assert total(OPTIMIZER) == round(n * (STEP_S + BACKWARD_S + OPTIMIZER_S), 9)
    assert total("root.lightning.[_TrainingEpochLoop]:train_dataloader_next") == round(
        n * FETCH_S, 9
    )
    # The lap total is its direct sections plus its own time, and all of the fake time.
    lap = snapshot["root.lightning"]
    direct = [
        stats.total
        for path, stats in snapshot.items()
        if path.startswith("root.lightning.") and path.count(".") == 2
    ]
    assert round(math.fsum(direct) + lap.self_time, 9) == round(lap.total, 9)
    assert total("root.lightning") == round(n * (FETCH_S + STEP_S + BACKWARD_S + OPTIMIZER_S), 9)
    assert total("root.lightning_fit") == total("root.lightning")
    assert cap.lt.health().internal_errors == 0
    assert cap.lt.health().misuse == 0


def test_profiler_summary_is_looptraces_table(cap: Capture, tmp_path: Path) -> None:
    """The report Lightning writes at the end of fit is looptrace's tree table."""
    profiler = integration.LooptraceProfiler(
        cap.lt, keep=everything, dirpath=str(tmp_path), filename="perf"
    )
    _fit(cap.clock, profiler=profiler)
    (report,) = tmp_path.glob("*perf*.txt")
    rows = {line.split()[0]: line.split() for line in report.read_text().splitlines() if line}
    header = ["section", "count", "mean", "p50", "p99", "total", "%", "parent", "self"]
    assert rows["section"] == header
    assert rows["root.lightning"][:6] == ["root.lightning", "20", "35", "ms", "35", "ms"]
    assert rows["run_training_batch"][:2] == ["run_training_batch", "20"]
    assert rows["root.lightning_fit"][:2] == ["root.lightning_fit", "1"]
    assert rows["run_training_epoch"][:2] == ["run_training_epoch", "2"]


def test_profiler_stops_by_name_out_of_order_and_ignores_unknown_stops(cap: Capture) -> None:
    """Stopping an outer action ends the inner ones; their later stops and strangers are no-ops."""
    profiler = integration.LooptraceProfiler(cap.lt, keep=everything)
    profiler.start("outer.a")
    profiler.start("inner")
    cap.clock.advance(1.0)
    profiler.stop("outer.a")
    cap.clock.advance(1.0)
    profiler.stop("inner")
    profiler.stop("never started")
    profiler.teardown("fit")
    snapshot = cap.lt.reset()
    assert {p: (s.count, s.total) for p, s in snapshot.items()} == {
        "root.lightning_fit": (1, 2.0),
        "root.lightning_fit.outer:a": (1, 1.0),
        "root.lightning_fit.outer:a.inner": (1, 1.0),
    }
    assert cap.lt.health().misuse == 0


def test_callback_laps_per_batch_and_logs_timing_with_log_dict(cap: Capture) -> None:
    """Each batch is a lap with forward, backward and optimizer; windows reach `log_dict`."""
    logged: list[dict[str, float]] = []

    class Keep(Tiny):
        def log_dict(self, values: Any, *args: Any, **kwargs: Any) -> None:
            logged.append(dict(values))

    callback = integration.LooptraceCallback(cap.lt, log_every=BATCHES, stats=("count", "total"))
    loader = torch.utils.data.DataLoader(Items(cap.clock), batch_size=1)
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(Keep(cap.clock), loader)
    assert len(logged) == EPOCHS
    # The gap before a batch is `data`; the first batch of an epoch has none.
    for window in logged:
        assert {k: round(v, 9) for k, v in window.items()} == {
            "timing/root/train/count": BATCHES,
            "timing/root/train/total": round(BATCHES * STEP - FETCH_S, 9),
            "timing/root/train/forward/count": BATCHES,
            "timing/root/train/forward/total": round(BATCHES * STEP_S, 9),
            "timing/root/train/backward/count": BATCHES,
            "timing/root/train/backward/total": round(BATCHES * BACKWARD_S, 9),
            "timing/root/train/after_backward/count": BATCHES,
            "timing/root/train/after_backward/total": 0.0,
            "timing/root/train/optimizer/count": BATCHES,
            "timing/root/train/optimizer/total": round(BATCHES * OPTIMIZER_S, 9),
            "timing/root/train/data/count": BATCHES - 1,
            "timing/root/train/data/total": round((BATCHES - 1) * FETCH_S, 9),
        }


def test_callback_with_an_unknown_statistic_is_a_config_error(cap: Capture) -> None:
    """A statistic name that does not exist is named at construction."""
    from looptrace import ConfigError

    with pytest.raises(ConfigError, match=r"LooptraceCallback: stats must be some of .*'p95'"):
        integration.LooptraceCallback(cap.lt, stats=("mean", "p95"))


def test_profiler_keeps_validation_out_of_the_batch_laps(cap: Capture) -> None:
    """Validation (and the sanity check) runs under `root.lightning_fit`, not in batch laps."""

    class Validated(Tiny):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.clock.advance(0.5)

    profiler = integration.LooptraceProfiler(cap.lt, keep=everything)
    windows: list[Snapshot] = []
    cap.lt.on_reset(windows.append)
    loader = torch.utils.data.DataLoader(Items(cap.clock), batch_size=1)
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=2,
        num_sanity_val_steps=1,
        profiler=profiler,
    )
    trainer.fit(Validated(cap.clock), loader, loader)
    (snapshot,) = windows
    n = BATCHES * EPOCHS
    assert snapshot["root.lightning"].count == n
    assert round(snapshot["root.lightning"].total, 9) == round(n * STEP, 9)
    validation = {
        path: stats.count
        for path, stats in snapshot.items()
        if path.endswith("validation_step") and stats.count
    }
    # One sanity-check batch before training, then 2 validation batches at each epoch's end,
    # inside `run_training_epoch` as Lightning nests them; no batch lap holds any of them.
    step = "[Strategy]SingleDeviceStrategy:validation_step"
    assert validation == {
        f"root.lightning_fit.{step}": 1,
        f"root.lightning_fit.run_training_epoch.{step}": 4,
    }


def test_profiler_keep_times_only_the_chosen_actions(cap: Capture) -> None:
    """With `keep`, other actions are not sections; the laps and the kept ones are unchanged."""
    profiler = integration.LooptraceProfiler(
        cap.lt, keep=lambda action: action.endswith((".backward", ".optimizer_step"))
    )
    windows: list[Snapshot] = []
    cap.lt.on_reset(windows.append)
    _fit(cap.clock, profiler=profiler)
    (snapshot,) = windows
    n = BATCHES * EPOCHS
    assert {path: stats.count for path, stats in snapshot.items()} == {
        "root.lightning": n,
        "root.lightning.[_TrainingEpochLoop]:train_dataloader_next": n,
        BATCH: n,
        OPTIMIZER: n,
        f"{OPTIMIZER}.{STRATEGY}:backward": n,
        "root.lightning_fit": 1,
        "root.lightning_fit.run_training_epoch": EPOCHS,
    }
    assert round(snapshot[f"{OPTIMIZER}.{STRATEGY}:backward"].total, 9) == round(n * BACKWARD_S, 9)
    assert cap.lt.health().misuse == 0


class Validated(Tiny):
    """Tiny with a validation step of half a fake second."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:  # noqa: D102
        self.clock.advance(0.5)


def test_profiler_default_is_the_batch_level_actions_with_short_names(
    cap: Capture, tmp_path: Path
) -> None:
    """Data, to_device, optimizer_step (training_step, backward), validation and checkpoint.

    Validation and the checkpoint at an epoch's end count in its last batch's lap, so the laps
    hold all of training's fake time; the sanity check runs before any lap.
    """
    profiler = integration.LooptraceProfiler(cap.lt, dirpath=str(tmp_path), filename="perf")
    windows: list[Snapshot] = []
    cap.lt.on_reset(windows.append)
    loader = torch.utils.data.DataLoader(Items(cap.clock), batch_size=1)
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        logger=False,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=2,
        num_sanity_val_steps=1,
        profiler=profiler,
    )
    trainer.fit(Validated(cap.clock), loader, loader)
    (snapshot,) = windows
    n = BATCHES * EPOCHS
    optimizer = "root.lightning.optimizer_step"
    assert {path: stats.count for path, stats in snapshot.items()} == {
        "root.lightning": n,
        "root.lightning.data": n,
        "root.lightning.to_device": n,
        optimizer: n,
        f"{optimizer}.training_step": n,
        f"{optimizer}.backward": n,
        "root.lightning.validation": EPOCHS,
        "root.lightning.checkpoint": EPOCHS,
        "root.lightning_fit": 1,
        "root.lightning_fit.validation": 1,
    }
    validation_s = 2 * (FETCH_S + 0.5)  # two batches
    totals = {path: round(stats.total, 9) for path, stats in snapshot.items()}
    assert totals["root.lightning.validation"] == round(EPOCHS * validation_s, 9)
    assert totals["root.lightning"] == round(n * STEP + EPOCHS * validation_s, 9)
    assert totals["root.lightning.data"] == round(n * FETCH_S, 9)
    assert totals[f"{optimizer}.backward"] == round(n * BACKWARD_S, 9)
    assert totals["root.lightning_fit.validation"] == round(FETCH_S + 0.5, 9)
    (report,) = tmp_path.glob("*perf*.txt")
    assert len(report.read_text().splitlines()) <= 30
    assert choose_timer(snapshot, None)[0] == "root.lightning"  # what `looptrace plot` splits
    assert cap.lt.health().internal_errors == 0


def test_short_name_maps_batch_level_actions_and_drops_the_rest() -> None:
    """Prefixes go; hooks and loops that are not batch-level get no section."""
    names = {
        action: integration.short_name(action)
        for action in (
            "[_TrainingEpochLoop].train_dataloader_next",
            "[Strategy]DDPStrategy.batch_to_device",
            "[Strategy]DDPStrategy.training_step",
            "[Strategy]DDPStrategy.backward",
            "[LightningModule]Model.optimizer_step",
            "save_checkpoint",
            "[LightningModule]Model.on_before_backward",
            "[Callback]ModelCheckpoint{'every_n_epochs': 1}.on_train_epoch_end",
            "run_training_epoch",
        )
    }
    assert list(names.values()) == [
        "data",
        "to_device",
        "training_step",
        "backward",
        "optimizer_step",
        "checkpoint",
        None,
        None,
        None,
    ]
