"""Small PyTorch loops on a fake clock: each part of a step moves the clock by a known amount."""

from __future__ import annotations

from typing import Any

import torch

from looptrace.testing import FakeClock

# Fake seconds each part takes; nothing else moves the clock.
FETCH_S, FORWARD_S, BACKWARD_S, OPTIMIZER_S, SAVE_S = 0.001, 0.010, 0.020, 0.004, 0.050


class Items(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """`n` random regression items; fetching one takes `FETCH_S` fake seconds."""

    def __init__(self, clock: FakeClock, n: int = 8) -> None:
        self.clock = clock
        self.x, self.y = torch.randn(n, 4), torch.randn(n, 1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        self.clock.advance(FETCH_S)
        return self.x[index], self.y[index]


class _SlowBackward(torch.autograd.Function):
    """Identity whose backward takes `BACKWARD_S` fake seconds."""

    @staticmethod
    def forward(ctx: Any, x: Any, clock: FakeClock) -> Any:
        ctx.clock = clock
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        ctx.clock.advance(BACKWARD_S)
        return grad, None


class Net(torch.nn.Module):
    """Two linear layers; a forward takes `FORWARD_S`, its backward `BACKWARD_S` fake seconds."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.first = torch.nn.Linear(4, 8)
        self.second = torch.nn.Linear(8, 1)

    def forward(self, x: Any) -> Any:  # noqa: D102
        self.clock.advance(FORWARD_S)
        return _SlowBackward.apply(self.second(torch.relu(self.first(x))), self.clock)


class ClockSGD(torch.optim.SGD):
    """SGD whose step takes `OPTIMIZER_S` fake seconds."""

    def __init__(self, params: Any, clock: FakeClock) -> None:
        super().__init__(params, lr=0.01)
        self.clock = clock

    def step(self, closure: Any = None) -> Any:  # noqa: D102
        self.clock.advance(OPTIMIZER_S)
        return super().step(closure)


def loader(clock: FakeClock, n: int = 8, batch_size: int = 1) -> Any:
    """Return a DataLoader of `Items` in the main process."""
    return torch.utils.data.DataLoader(Items(clock, n), batch_size=batch_size)


def train(model: Any, optimizer: Any, batches: Any, *, accumulate: int = 1) -> None:
    """One epoch: forward, MSE, backward; an optimizer step every `accumulate` batches."""
    for index, (x, y) in enumerate(batches):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if (index + 1) % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()


def counts(snapshot: Any) -> dict[str, int]:
    """Return `{path: count}` of a snapshot."""
    return {path: stats.count for path, stats in snapshot.items()}


def totals(snapshot: Any) -> dict[str, float]:
    """Return `{path: total seconds}` of a snapshot, rounded to the nanosecond."""
    return {path: round(stats.total, 9) for path, stats in snapshot.items()}


class SlowFile:
    """A file-like sink whose every write takes `SAVE_S` fake seconds, once per save."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.data = bytearray()
        self.saves = 0

    def write(self, chunk: bytes) -> int:
        """Keep the bytes; the first write of a save moves the clock."""
        if not self.data:
            self.clock.advance(SAVE_S)
        self.data += chunk
        return len(chunk)

    def flush(self) -> None:
        """Nothing is buffered."""
