"""Lightning's profiler actions: which are batch-level, their short names, what they mean."""

from __future__ import annotations

import enum

FETCH = "[_TrainingEpochLoop].train_dataloader_next"
EPOCH = "run_training_epoch"
BATCH = "run_training_batch"
# Actions that start outside a training batch even while its lap runs (validation inside an
# epoch runs after a batch's hooks and before the next fetch).
_OUTSIDE_BATCH = ("[_EvaluationLoop]", "validation", "sanity")
CHECKPOINT = "save_checkpoint"
# The batch-level actions timed by default: (where the action is defined, method) -> section.
_SHORT = {
    ("[Strategy]", "batch_to_device"): "to_device",
    ("[Strategy]", "training_step"): "training_step",
    ("[Strategy]", "backward"): "backward",
    ("[LightningModule]", "optimizer_step"): "optimizer_step",
}


def short_name(action: str) -> str | None:
    """Return the section name of a batch-level Lightning action, None for any other action.

    The data fetch is `data`, `[Strategy]SingleDeviceStrategy.backward` is `backward`,
    `[LightningModule]Model.optimizer_step` is `optimizer_step`, `save_checkpoint` is
    `checkpoint`; validation's actions are one `validation` section (see `LooptraceProfiler`).
    """
    if action == FETCH:
        return "data"
    if action == CHECKPOINT:
        return "checkpoint"
    head, _, method = action.rpartition(".")
    for (owner, name), section in _SHORT.items():
        if method == name and head.startswith(owner):
            return section
    return None


def validating(action: str) -> bool:
    """Whether `action` belongs to a validation run (or the sanity check before training)."""
    return any(mark in action for mark in _OUTSIDE_BATCH)


def ends_validation(action: str) -> bool:
    """Whether `action` starting means a validation run is over (training or saving goes on)."""
    if validating(action):
        return False
    return "train" in action or action == CHECKPOINT or "teardown" in action


class Kind(enum.Enum):
    """What an action means for the laps."""

    FETCH = "a training batch's data fetch"
    BATCH = "a training batch"
    OUTSIDE = "outside training batches"
    SECTION = "a section"
    SKIP = "not timed"


def kind_of(action: str) -> Kind:
    if action == FETCH:
        return Kind.FETCH
    if action == BATCH:
        return Kind.BATCH
    if any(mark in action for mark in _OUTSIDE_BATCH):
        return Kind.OUTSIDE
    return Kind.SECTION


def section_name(action: str) -> str:
    """Return the section name of a Lightning action: its dots become `:`.

    `[Strategy]SingleDeviceStrategy.backward` becomes `[Strategy]SingleDeviceStrategy:backward`
    (a dot separates path levels in looptrace).
    """
    return action.replace(".", ":") or "_"
