"""One rank of a real torch.distributed (gloo, CPU) job, run by tests/test_distributed.py.

Usage: ``python rank_worker.py STORE OUT [LISTED]`` with ``RANK`` and ``WORLD_SIZE`` set as
torchrun sets them. The rank drives a looptrace on a fake clock through the windows below, each
closed by ``reset(across_ranks=True)``, and writes what every reset returned, and the
collective calls and bytes each reset moved (counted at torch.distributed's all_reduce and
all_gather), to OUT as JSON. LISTED, when given, replaces
`looptrace._distributed.collectives.LISTED`, so that small jobs take the bitmap path of
absent ranks.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from looptrace import RankInfo, Snapshot
from looptrace._distributed import collectives as _collectives
from looptrace.testing import Capture, capture

STEPS = 3
FORWARD_S = 0.100
SLOW_FORWARD_S = 0.250


def slow_rank(world: int) -> int:
    """Return the rank whose forward pass is slow: neither the first nor, with 4, the last."""
    return world // 2


def mismatched(cap: Capture, rank: int, world: int) -> None:
    """Every rank trains; one is slow in forward, rank 1 skips backward, the last checkpoints."""
    train = cap.lt.timer("training")
    for _ in range(STEPS):
        train.record("data")
        cap.clock.advance(0.010)
        train.record("forward")
        cap.clock.advance(SLOW_FORWARD_S if rank == slow_rank(world) else FORWARD_S)
        if rank != 1:
            train.record("backward")
            cap.clock.advance(0.050)
        if rank == world - 1:
            train.record("checkpoint")
            cap.clock.advance(0.500)
        train.record()
    train.stop()


def rank_zero_idle(cap: Capture, rank: int, world: int) -> None:
    """Rank 0 times nothing; rank r evaluates r batches of (r + 1) * 10 ms."""
    evaluate = cap.lt.timer("eval")
    for _ in range(rank):
        with evaluate.section("batch"):
            cap.clock.advance(0.010 * (rank + 1))


def all_idle(cap: Capture, rank: int, world: int) -> None:
    """No rank times anything."""


def all_equal(cap: Capture, rank: int, world: int) -> None:
    """Every rank times the same 20 ms: a tie on every statistic."""
    with cap.lt.timer("sync").section("barrier"):
        cap.clock.advance(0.020)


WINDOWS: dict[str, Callable[[Capture, int, int], None]] = {
    "mismatched": mismatched,
    "rank_zero_idle": rank_zero_idle,
    "all_idle": all_idle,
    "all_equal": all_equal,
    "steady": mismatched,  # the same paths again: nothing new to agree on
    "table_lost": mismatched,  # rank 0 forgot the agreed paths (as a restarted rank would)
}


def result(snapshot: Snapshot) -> dict[str, Any]:
    """Return what a test needs of a snapshot: its dict, its metrics and its local metrics."""
    local = Snapshot(snapshot, start_ns=snapshot.start_ns, end_ns=snapshot.end_ns, rank=0)
    return {
        "rank": snapshot.rank,
        "reduced": snapshot.across_ranks is not None,
        "dict": snapshot.to_dict(),
        "metrics": snapshot.as_metrics(),
        "local_metrics": local.as_metrics(),
    }


COUNTED = {"calls": 0, "bytes": 0}


def count_collectives() -> None:
    """Count torch.distributed's all_reduce and all_gather calls and the bytes they return."""
    all_reduce, all_gather = dist.all_reduce, dist.all_gather

    def counted_all_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTED["calls"] += 1
        COUNTED["bytes"] += tensor.nbytes
        return all_reduce(tensor, *args, **kwargs)

    def counted_all_gather(outputs: list[Any], *args: Any, **kwargs: Any) -> Any:
        COUNTED["calls"] += 1
        COUNTED["bytes"] += sum(t.nbytes for t in outputs)
        return all_gather(outputs, *args, **kwargs)

    dist.all_reduce = counted_all_reduce
    dist.all_gather = counted_all_gather


def traffic() -> dict[str, int]:
    """Return the collective calls and bytes this process has counted so far."""
    return dict(COUNTED)


def reduced(cap: Capture) -> dict[str, Any]:
    """Return `result()` of a `reset(across_ranks=True)`, with what its collectives moved."""
    before = traffic()
    snapshot = cap.lt.reset(across_ranks=True)
    after = traffic()
    return {**result(snapshot), "traffic": {k: after[k] - before[k] for k in after}}


def main(store: str, out: str, listed: str | None = None) -> None:
    """Join the job, run every window, write the results, leave the job."""
    if listed is not None:
        _collectives.LISTED = int(listed)
    info = RankInfo.from_env()
    count_collectives()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    cap = capture(rank=info)
    results = {}
    for name, window in WINDOWS.items():
        window(cap, info.rank, info.world_size)
        if name == "table_lost" and info.rank == 0:
            _collectives._TABLE.clear()
        results[name] = reduced(cap)
    cap.lt.shutdown()
    results["after_shutdown"] = reduced(cap)
    results["health"] = {"internal_errors": cap.lt.health().internal_errors}
    dist.barrier()  # no rank tears gloo down while another still talks to it
    dist.destroy_process_group()
    with open(out, "w") as file:
        json.dump(results, file)


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main(*sys.argv[1:])
