"""`instrument()` beside the Lightning integration: its sections win, the calls nest inside."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from looptrace.testing import Capture

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
L = pytest.importorskip("lightning", reason="the lightning extra is not installed")
integration = pytest.importorskip("looptrace.integrations.torch")
lightning = pytest.importorskip("looptrace.integrations.lightning")

from tests.helpers.torch_loops import FORWARD_S, ClockSGD, Net, counts, loader, totals  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated"),
    pytest.mark.filterwarnings("ignore:The '\\w+' does not have many workers"),
]
N = 4


@pytest.fixture(autouse=True)
def _quiet_lightning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lightning")


class Tiny(L.LightningModule):  # type: ignore[misc]
    """A LightningModule around `Net`, stepping `ClockSGD`."""

    def __init__(self, cap: Capture) -> None:
        super().__init__()
        self.cap = cap
        self.net = Net(cap.clock)

    def training_step(self, batch: Any, batch_idx: int) -> Any:  # noqa: D102
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:  # noqa: D102
        return ClockSGD(self.parameters(), self.cap.clock)


def test_lightnings_sections_win_and_forward_nests_in_its_training_step(cap: Capture) -> None:
    """With the Lightning profiler: no second backward or optimizer; forward in training_step."""
    windows: list[Any] = []
    cap.lt.on_reset(windows.append)
    handle = integration.instrument(cap.lt)
    try:
        trainer = L.Trainer(
            max_epochs=1,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            profiler=lightning.LooptraceProfiler(cap.lt),
        )
        trainer.fit(Tiny(cap), loader(cap.clock, N))
    finally:
        handle.uninstrument()
    snapshot = windows[0]  # the profiler closed it at the end of fit
    found = counts(snapshot)
    forward = "root.lightning.optimizer_step.training_step.forward"
    assert found[forward] == N
    assert totals(snapshot)[forward] == round(N * FORWARD_S, 9)
    assert found["root.lightning.optimizer_step.backward"] == N
    inside = [path for path in found if path.startswith("root.lightning.")]
    assert not [path for path in inside if path.endswith((".optimizer", "backward.backward"))]
    # Only the loader's iterator, made before Lightning's first section, is a lap of its own.
    assert [path for path in found if path.startswith("root.train.")] == ["root.train.data"]
    assert found["root.train.data"] == 1
    assert cap.lt.health().internal_errors == 0
