"""A PyTorch loop whose parts take known times: work that dominates looptrace's overhead.

Each part spins on `time.perf_counter()` to its deadline rather than sleeping: a busy machine
delays the wake-up from a sleep by milliseconds, while a spin ends at its deadline unless the
process is descheduled just then. Jobs of several ranks sleep (`parts(spin=False)`): four
spinning ranks on two cores deschedule each other. It imports no looptrace: the zero-code
worker runs it as a user's script would.
"""

from __future__ import annotations

import time
from typing import Any

import torch

# Seconds each part of a step takes.
DATA_S, FORWARD_S, BACKWARD_S, OPTIMIZER_S = 0.025, 0.030, 0.030, 0.025


SPIN = [True]  # whether `busy` spins (else it sleeps): set by `parts`


def busy(seconds: float) -> None:
    """Spin (or sleep) until `seconds` have passed."""
    if not SPIN[0]:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Items(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """`n` random regression items; fetching one takes `DATA_S`."""

    def __init__(self, n: int) -> None:
        self.x, self.y = torch.randn(n, 4), torch.randn(n, 1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        busy(DATA_S)
        return self.x[index], self.y[index]


class _SleepyBackward(torch.autograd.Function):
    """Identity whose backward takes `BACKWARD_S`."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        busy(BACKWARD_S)
        return grad


class Net(torch.nn.Module):
    """A linear layer whose forward takes `FORWARD_S` plus `extra_s`."""

    def __init__(self, extra_s: float = 0.0) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.extra_s = extra_s

    def forward(self, x: Any) -> Any:  # noqa: D102
        busy(FORWARD_S + self.extra_s)
        return _SleepyBackward.apply(self.layer(x))


class SleepySGD(torch.optim.SGD):
    """SGD whose step takes `OPTIMIZER_S`."""

    def step(self, closure: Any = None) -> Any:  # noqa: D102
        busy(OPTIMIZER_S)
        return super().step(closure)


def parts(n: int, extra_s: float = 0.0, *, spin: bool = True) -> tuple[Any, Any, Any]:
    """Return a loader of `n` single-item batches, the model and its optimizer."""
    SPIN[0] = spin
    torch.manual_seed(0)
    model = Net(extra_s)
    loader = torch.utils.data.DataLoader(Items(n), batch_size=1)
    return loader, model, SleepySGD(model.parameters(), lr=0.01)
