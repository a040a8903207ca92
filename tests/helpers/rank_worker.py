"""One rank of a real torch.distributed (gloo, CPU) job, run by tests/test_distributed.py.

Usage: ``python rank_worker.py STORE OUT [LISTED]`` with ``RANK`` and ``WORLD_SIZE`` set as
torchrun sets them; ``python rank_worker.py STORE OUT skipped`` or ``... fault AFTER`` runs the
realignment scenarios instead (see `scenario`). The rank drives a looptrace on a fake clock
through the windows below, each closed by ``reset(across_ranks=True)``, and writes what every
reset returned, and the collective calls and bytes each reset moved (counted at
torch.distributed's all_reduce and all_gather), to OUT as JSON. LISTED, when given, replaces
`looptrace._distributed.collectives.LISTED`, so that small jobs take the bitmap path of
absent ranks.
"""

from __future__ import annotations

import json
import logging
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


# --- realignment: a rank that skips a reduce, a rank that fails between collectives ---

SCENARIO_WINDOWS = 6
ODD_WINDOW = 2  # the window rank 1 resets without across_ranks=True, or fails in


def scenario_window(cap: Capture, index: int, rank: int) -> None:
    """Time one window: a step whose length tells windows and ranks apart, a new path at 2."""
    train = cap.lt.timer("train")
    with train.section("step"):
        cap.clock.advance(0.1 * (index + 1) + 0.01 * rank)
    if index == ODD_WINDOW:  # a path new to every rank: the table grows in this reduce
        with cap.lt.timer("eval").section("batch"):
            cap.clock.advance(0.05)


def inject_fault(after: int) -> Callable[[], None]:
    """Make this rank's next reduce raise before its collective number `after` (from 0)."""
    original = _collectives._Wire.all_reduce
    calls = [0]

    def failing(self: Any, tensor: Any, op: Any) -> None:
        calls[0] += 1
        if calls[0] == after + 1:
            raise RuntimeError("injected between collectives")
        original(self, tensor, op)

    _collectives._Wire.all_reduce = failing  # type: ignore[method-assign]

    def restore() -> None:
        _collectives._Wire.all_reduce = original  # type: ignore[method-assign]

    return restore


class Warnings(logging.Handler):
    """Keep the messages of looptrace's warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the record's message."""
        self.messages.append(record.getMessage())


def scenario(store: str, out: str, name: str, after: str = "0") -> None:
    """Run `SCENARIO_WINDOWS` windows; at `ODD_WINDOW` rank 1 skips the reduce or fails in it.

    `skipped`: rank 1 closes that window with `reset()` (no across_ranks). `fault`: rank 1's
    reduce of that window raises before its collective number AFTER.
    """
    info = RankInfo.from_env()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    warnings = Warnings()
    logging.getLogger("looptrace").addHandler(warnings)
    cap = capture(rank=info)
    windows = []
    for index in range(SCENARIO_WINDOWS):
        scenario_window(cap, index, info.rank)
        odd = index == ODD_WINDOW and info.rank == 1
        restore = inject_fault(int(after)) if odd and name == "fault" else None
        snapshot = cap.lt.reset(across_ranks=not (odd and name == "skipped"))
        if restore is not None:
            restore()
        windows.append(
            {
                **result(snapshot),
                "internal_errors": cap.lt.health().internal_errors,
                "warnings": list(warnings.messages),
            }
        )
        warnings.messages.clear()
    cap.lt.shutdown()
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as file:
        json.dump(windows, file)


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if len(sys.argv) > 3 and sys.argv[3] in ("skipped", "fault"):
        scenario(*sys.argv[1:])
    else:
        main(*sys.argv[1:])
