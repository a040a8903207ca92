"""One rank of a real torch.distributed (gloo, CPU) job, run by tests/test_straggler.py.

Usage: ``python straggler_worker.py STORE OUT`` with ``RANK`` and ``WORLD_SIZE`` set as
torchrun sets them. The rank runs every scenario of `SCENARIOS` on a fake clock, each with a
looptrace of its own and a timer named after it, closing each window with
``timer.reset(across_ranks=True)``, and writes per scenario and window the warnings and worse
of the window's diagnosis, its straggler and the slowest and fastest rank of each path's
total to OUT as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from looptrace import RankInfo
from looptrace.testing import Capture, capture

STEPS = 5
CHRONIC_SLOW = {0, 1, 2, 4, 5, 6, 8}  # the windows of "chronic" where the slow rank is slow


def slow_rank(world: int) -> int:
    """Return the slow rank: neither the first nor, with 4, the last."""
    return world // 2


def steps(cap: Capture, name: str, sections: dict[str, float]) -> None:
    """Run `STEPS` laps of timer `name` through `sections` (section: seconds)."""
    timer = cap.lt.timer(name)
    for _ in range(STEPS):
        timer.record()
        for section, seconds in sections.items():
            timer.record(section)
            cap.clock.advance(seconds)
    timer.stop()


def healthy(cap: Capture, rank: int, world: int, window: int) -> None:
    """Every rank alike: 5 ms data, 60 ms forward, 35 ms backward."""
    steps(cap, "healthy", {"data": 0.005, "forward": 0.060, "backward": 0.035})


def input_bound(cap: Capture, rank: int, world: int, window: int) -> None:
    """Every rank alike, 30 % of the lap in data."""
    steps(cap, "input_bound", {"data": 0.030, "forward": 0.050, "backward": 0.020})


def slowed(section: str, slow: bool, rank: int, world: int) -> dict[str, float]:
    """Return the sections of a step where the slow rank takes 20 ms more in `section`.

    The other ranks wait those 20 ms in `backward` (the gradient all-reduce), so every
    rank's lap takes as long.
    """
    sections = {"data": 0.005, "forward": 0.060, "backward": 0.035}
    if slow and rank == slow_rank(world):
        sections[section] += 0.020
    elif slow:
        sections["backward"] += 0.020
    return sections


def slow_forward(cap: Capture, rank: int, world: int, window: int) -> None:
    """Slow one rank 20 ms a step in forward; the others wait for it in backward."""
    steps(cap, "slow_forward", slowed("forward", True, rank, world))


def slow_data(cap: Capture, rank: int, world: int, window: int) -> None:
    """Slow one rank 20 ms a step in data; the others wait for it in backward."""
    steps(cap, "slow_data", slowed("data", True, rank, world))


def no_wait_section(cap: Capture, rank: int, world: int, window: int) -> None:
    """No wait section marked: the slow rank's laps are 20 ms longer, in forward."""
    forward = 0.080 if rank == slow_rank(world) else 0.060
    steps(cap, "no_wait_section", {"data": 0.005, "forward": forward, "backward": 0.035})


def chronic(cap: Capture, rank: int, world: int, window: int) -> None:
    """Slow one rank in forward in the windows of `CHRONIC_SLOW`."""
    steps(cap, "chronic", slowed("forward", window in CHRONIC_SLOW, rank, world))


Scenario = Callable[[Capture, int, int, int], None]
SCENARIOS: dict[str, tuple[Scenario, int, tuple[str, ...]]] = {
    "healthy": (healthy, 2, ("backward",)),
    "input_bound": (input_bound, 1, ("backward",)),
    "slow_forward": (slow_forward, 1, ("backward",)),
    "slow_data": (slow_data, 1, ("backward",)),
    "no_wait_section": (no_wait_section, 1, ()),
    "chronic": (chronic, 10, ("backward",)),
}


def window_result(snapshot: Any) -> dict[str, Any]:
    """Return a window's warnings and worse, straggler and slowest/fastest rank per path."""
    assert snapshot.across_ranks is not None
    return {
        "findings": [
            {k: v for k, v in f.to_dict().items() if k != "evidence"}
            for f in snapshot.diagnosis()
            if f.severity != "info"
        ],
        "straggler": None if snapshot.straggler is None else snapshot.straggler.to_dict(),
        "ranks": {
            path: [spread.total.slowest_rank, spread.total.fastest_rank]
            for path, spread in snapshot.across_ranks.items()
        },
    }


def main(store: str, out: str) -> None:
    """Run every scenario on this rank and write what each window's reset returned."""
    info = RankInfo.from_env()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    results: dict[str, list[dict[str, Any]]] = {}
    for name, (run, windows, waits) in SCENARIOS.items():
        cap = capture(rank=info, wait_sections=waits)
        results[name] = []
        for window in range(windows):
            run(cap, info.rank, info.world_size, window)
            snapshot = cap.lt.timer(name).reset(across_ranks=True)
            results[name].append(window_result(snapshot))
        cap.lt.shutdown()
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as file:
        json.dump(results, file)


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main(*sys.argv[1:])
