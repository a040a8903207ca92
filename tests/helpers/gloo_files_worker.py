"""One rank of a real torch.distributed (gloo, CPU) job that writes looptrace's files.

Usage: ``python gloo_files_worker.py STORE DIRECTORY [GO]`` with ``RANK`` and ``WORLD_SIZE``
set as torchrun sets them. The rank trains `STEPS` steps on a fake clock (data, forward,
backward; `backward` is the wait section), every 5th step traced, and closes a window every
`WINDOW` steps with ``reset(across_ranks=True)``. Its spans and snapshots go to
DIRECTORY/spans.rank<N>.jsonl and DIRECTORY/snapshots.rank<N>.jsonl. Rank 1 is 20 ms slower
in forward each step and stalls 0.5 s in step 13's data; the others wait for it in backward,
so step 13 is a lap traced for its slowness on every rank. With GO, window k starts only once
the file GO/k exists, so that a test watching the files sees them grow one window at a time.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch.distributed as dist

from looptrace import RankInfo, configure
from looptrace.testing import FakeClock

STEPS = 30
WINDOW = 10
SLOW_RANK = 1
STALLED_STEP = 13
GO_TIMEOUT_S = 120


def main(store: str, directory: str, go: str | None = None) -> None:
    """Run the steps on this rank, writing its files into `directory`."""
    info = RankInfo.from_env()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    clock = FakeClock(start_s=0.0)
    lt = configure(
        "looptrace-gloo-test",
        clock=clock,
        rank=info,
        trace_every=5,
        trace_file=Path(directory) / "spans.jsonl",
        snapshot_file=Path(directory) / "snapshots.jsonl",
        wait_sections=("backward",),
    )
    train = lt.timer("training")
    slow = info.rank == SLOW_RANK
    for step in range(STEPS):
        if go is not None and step % WINDOW == 0:
            wait_for(Path(go) / str(step // WINDOW))
        train.record("data")
        clock.advance(0.010 + (0.5 if slow and step == STALLED_STEP else 0.0))
        train.record("forward")
        clock.advance(0.080 if slow else 0.060)
        train.record("backward")  # the gradient all-reduce: the others wait here for rank 1
        clock.advance(0.030 if slow else 0.050 + (0.5 if step == STALLED_STEP else 0.0))
        if step < STEPS - 1:
            train.record()
        else:
            train.stop()
        if step % WINDOW == WINDOW - 1:
            lt.reset(across_ranks=True)
    lt.shutdown()
    dist.barrier()
    dist.destroy_process_group()


def wait_for(path: Path) -> None:
    """Wait until `path` exists (a hang guard ends the rank)."""
    deadline = time.monotonic() + GO_TIMEOUT_S
    while not path.exists():
        if time.monotonic() > deadline:
            sys.exit(f"{path} did not appear in {GO_TIMEOUT_S} s")
        time.sleep(0.02)


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main(*sys.argv[1:])
