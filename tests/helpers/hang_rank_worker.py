"""One rank of a real gloo job whose rank 2 hangs, run by tests/test_hangs_ranks.py.

Usage: ``python hang_rank_worker.py STORE SNAPSHOT PORT`` with ``RANK`` and ``WORLD_SIZE`` set as
torchrun sets them. Every rank runs steps of `data` then `backward` (an all-reduce, marked as
a wait), closing a window after step 5; at step `HANG_STEP` rank 2 blocks forever inside
`data`, so the others block in the all-reduce inside `backward`. It prints `started` once
configured; the test kills it. Each rank serves Prometheus on PORT plus its local rank.
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import looptrace
from looptrace import RankInfo

HANG_STEP = 8
STUCK_RANK = 2
THRESHOLD_S = 3.0


def main(store: str, snapshot: str, port: str) -> None:
    """Run steps until rank 2 hangs in `data`."""
    info = RankInfo.from_env()
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=info.rank,
        world_size=info.world_size,
        timeout=timedelta(seconds=600),
    )
    lt = looptrace.configure(
        snapshot_file=snapshot,
        traces_exporter="none",
        prometheus=int(port),
        hang_after=THRESHOLD_S,
        hang_factor=3.0,
    )
    print("started", flush=True)
    train = lt.timer("train")
    tensor = torch.zeros(4)
    for step in range(HANG_STEP + 1):
        train.record("data")
        if info.rank == STUCK_RANK and step == HANG_STEP:
            threading.Event().wait()  # a loader that never returns
        time.sleep(0.01)
        train.record("backward", wait=True)
        dist.all_reduce(tensor)
        train.record()
        if step == 5:
            lt.reset()
    threading.Event().wait()  # (not reached: the all-reduce of the last step waits for rank 2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
