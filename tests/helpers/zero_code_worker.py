"""A training script with no looptrace line, run by tests/test_run_zero_code.py.

Usage: ``python zero_code_worker.py STORE OUT STEPS [SLOW_RANK]``. With ``WORLD_SIZE`` above 1
it joins a gloo job through the file store STORE and trains a DistributedDataParallel model;
rank SLOW_RANK takes 60 ms more in each forward, well past a busy machine's noise. It writes
``{"steps": STEPS}`` to OUT.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

try:
    from tests.helpers.sleepy import parts
except ImportError:  # run as a script: tests/helpers/ is the first import path
    from sleepy import parts  # type: ignore[no-redef]


def main(store: str, out: str, steps: int, slow_rank: int) -> None:
    """Train `steps` steps, one batch each; in a job of several ranks through DDP."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    loader, model, optimizer = parts(steps, 0.060 if rank == slow_rank else 0.0, spin=world == 1)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    with open(out, "w") as file:
        json.dump({"steps": steps}, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else -1)
