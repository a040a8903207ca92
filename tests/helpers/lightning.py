"""A tiny Lightning model and data set on a fake clock, for the integration tests.

Import it only after `pytest.importorskip("lightning")`: it needs torch and Lightning.
"""

from __future__ import annotations

from typing import Any

import lightning as L  # noqa: N812 - the name its documentation uses
import torch

from looptrace.testing import FakeClock

BATCHES, EPOCHS = 10, 2
# Fake seconds each part of a batch takes; nothing else moves the clock.
FETCH_S, STEP_S, BACKWARD_S, OPTIMIZER_S = 0.001, 0.010, 0.020, 0.004
STEP = FETCH_S + STEP_S + BACKWARD_S + OPTIMIZER_S


class Items(torch.utils.data.Dataset):  # type: ignore[misc]
    """Random regression items; fetching one takes `FETCH_S` fake seconds."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.x, self.y = torch.randn(BATCHES, 4), torch.randn(BATCHES, 1)

    def __len__(self) -> int:
        return BATCHES

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        self.clock.advance(FETCH_S)
        return self.x[index], self.y[index]


class Tiny(L.LightningModule):  # type: ignore[misc]
    """A linear model whose training step, backward and optimizer step take fake time."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:  # noqa: D102
        self.clock.advance(STEP_S)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def backward(self, loss: Any, *args: Any, **kwargs: Any) -> None:  # noqa: D102
        self.clock.advance(BACKWARD_S)
        loss.backward()

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:  # noqa: D102
        super().optimizer_step(*args, **kwargs)
        self.clock.advance(OPTIMIZER_S)

    def configure_optimizers(self) -> Any:  # noqa: D102
        return torch.optim.SGD(self.parameters(), lr=0.01)


def everything(action: str) -> bool:
    """`keep=` that times every Lightning action."""
    return True
