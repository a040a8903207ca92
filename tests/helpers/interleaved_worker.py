"""A training script run by tests/test_run_zero_code.py under ``looptrace run --reset-every 1``.

Usage: ``python interleaved_worker.py EPOCHS STEPS``. Each epoch runs the loop of
tests/zero_code_worker.py twice over the same work: first with no looptrace line (the
instrumentation times it as timer `train`), then timed by hand as timer `hand`, on the
looptrace `looptrace run` set up, a window a step. Alternating the two in one process, a busy
machine slows both alike.
"""

from __future__ import annotations

import sys

import torch

from looptrace.integrations.auto import current

try:
    from tests.helpers.sleepy import parts
except ImportError:  # run as a script: tests/helpers/ is the first import path
    from sleepy import parts  # type: ignore[no-redef]


def main(epochs: int, steps: int) -> None:
    """Alternate a zero-code epoch and a hand-timed one, `epochs` times."""
    handle = current()
    assert handle is not None, "run me under looptrace run"
    lt = handle.lt
    hand = lt.timer("hand")
    loader, model, optimizer = parts(steps)
    for _ in range(epochs):
        for x, y in loader:  # no looptrace line
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        for x, y in hand.iterate(loader):
            with hand.section("forward"):
                out = model(x)
            loss = torch.nn.functional.mse_loss(out, y)
            with hand.section("backward"):
                loss.backward()
            with hand.section("optimizer"):
                optimizer.step()
            optimizer.zero_grad()
            lt.reset()  # a window a step, as the instrumentation's


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
