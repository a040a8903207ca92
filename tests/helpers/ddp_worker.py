"""One rank of a real DistributedDataParallel job (gloo, CPU), run by tests/test_ddp_answers.py.

Usage: ``python ddp_worker.py STORE OUT`` with ``RANK`` and ``WORLD_SIZE`` set as torchrun
sets them. Each scenario trains a small model wrapped in `DistributedDataParallel` (its
gradient all-reduce inside `backward`, marked as the wait section) on the real clock, one
fault injected as a sleep, closing a window every `STEPS` steps with
``reset(across_ranks=True)``; it writes, per scenario and window, the warnings and worse
of the window's diagnosis as ``[kind, severity, path, rank]`` to OUT as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from looptrace import RankInfo
from looptrace._core.clock import MonotonicClock
from looptrace.testing import capture

STEPS = 10  # steps per window
COMPUTE_S = 0.015  # the model's forward, as a sleep: long against a busy machine's noise
SLOW_S = 0.030  # the injected fault: this much more a step
SLOW_LOADER_RANK = 1
SLOW_FORWARD_RANK = 2
LEAKING_RANK = 3
LEAK_BYTES = 80 << 20  # per window: 320 MiB over the run


class Loader:
    """A sized loader of `n` batches; each fetch sleeps `fetch_s` (the input pipeline)."""

    def __init__(self, n: int, fetch_s: float) -> None:
        self.n = n
        self.fetch_s = fetch_s

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[torch.Tensor]:
        for _ in range(self.n):
            if self.fetch_s:
                time.sleep(self.fetch_s)
            yield torch.ones(8, 16)


def train(name: str, rank: int, windows: int, **fault: Any) -> list[list[list[Any]]]:
    """Train `windows` windows of scenario `name`; return each window's findings."""
    cap = capture(
        rank=RankInfo.from_env(),
        clock=MonotonicClock(),
        trace_every=0,
        wait_sections=("backward",),
    )
    model = DistributedDataParallel(nn.Linear(16, 16))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    timer = cap.lt.timer(name)
    found: list[list[list[Any]]] = []
    leaked: list[bytes] = []
    fetch_s = SLOW_S if fault.get("slow_loader") == rank else fault.get("fetch_s", 0.0)
    steps = fault.get("steps", STEPS)
    drop_from = fault.get("drop_from", windows) * steps
    loader = Loader(windows * steps, fetch_s)
    for step, batch in enumerate(timer.iterate(loader, items=8)):
        with timer.section("forward"):
            time.sleep(COMPUTE_S + (SLOW_S if fault.get("slow_forward") == rank else 0.0))
            if step >= drop_from:
                time.sleep(SLOW_S)
            loss = model(batch).sum()
        with timer.section("backward"):
            loss.backward()
        with timer.section("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        if fault.get("eval_checkpoint") and step % steps == steps - 1:
            with timer.section("eval"):
                time.sleep(4 * COMPUTE_S)
            with timer.section("checkpoint"):
                time.sleep(4 * COMPUTE_S)
        if step % steps == steps - 1:  # inside the step's lap, as a loop resets
            if fault.get("leak") == rank:
                leaked.append(b"\x01" * LEAK_BYTES)  # every page touched: resident
            # The whole looptrace's window where memory counts, else the timer's own: each
            # scenario's straggler counts are its own.
            closes = cap.lt if fault.get("leak") is not None else timer
            snapshot = closes.reset(across_ranks=True)
            found.append([[f.kind, f.severity, f.path, f.rank] for f in snapshot.diagnosis()])
    cap.lt.shutdown()
    return found


SCENARIOS: dict[str, tuple[int, dict[str, Any]]] = {
    "healthy": (8, {"steps": 20}),
    "input_bound": (2, {"fetch_s": 0.012}),
    "slow_loader": (3, {"slow_loader": SLOW_LOADER_RANK}),
    "slow_forward": (3, {"slow_forward": SLOW_FORWARD_RANK}),
    "eval_checkpoint": (2, {"eval_checkpoint": True}),
    "lasting_drop": (6, {"drop_from": 3}),
    "host_leak": (6, {"leak": LEAKING_RANK}),
}


def main(store: str, out: str) -> None:
    """Run every scenario on this rank; write each window's findings."""
    info = RankInfo.from_env()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    torch.manual_seed(0)
    results = {
        name: train(name, info.rank, windows, **fault)
        for name, (windows, fault) in SCENARIOS.items()
    }
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as file:
        json.dump(results, file)


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main(*sys.argv[1:])
