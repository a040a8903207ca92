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

import torch
import torch.distributed as dist

from looptrace import RankInfo
from looptrace.testing import Capture, capture

try:
    from tests.helpers.allocator import GIB, Allocator
except ImportError:  # run as a script: tests/helpers/ is the first import path
    from allocator import GIB, Allocator  # type: ignore[no-redef]

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


def marked_wait(cap: Capture, rank: int, world: int, window: int) -> None:
    """Slow one rank 20 ms a step in forward; the all-reduce marked `record(..., wait=True)`."""
    timer = cap.lt.timer("marked_wait")
    sections = slowed("forward", True, rank, world)
    sections["allreduce"] = sections.pop("backward")
    for _ in range(STEPS):
        timer.record()
        for section, seconds in sections.items():
            timer.record(section, wait=section == "allreduce")
            cap.clock.advance(seconds)
    timer.stop()


def throughput_drop(cap: Capture, rank: int, world: int, window: int) -> None:
    """Count 32 samples a step; from window 4 the slow rank takes 50 ms more in forward a step.

    Every rank waits for it in backward: each rank's samples per second drop alike.
    """
    timer = cap.lt.timer("throughput_drop")
    sections = slowed("forward", window >= 4, rank, world)
    if window >= 4:
        sections["forward" if rank == slow_rank(world) else "backward"] += 0.030
    for _ in range(STEPS):
        timer.record()
        timer.count("samples", 32)
        for section, seconds in sections.items():
            timer.record(section)
            cap.clock.advance(seconds)
    timer.stop()


def memory(cap: Capture, rank: int, world: int, window: int) -> None:
    """Creep the slow rank's device peak 1 GiB a window; reserve 76 of 80 GiB in the last."""
    allocator = ALLOCATOR[0]
    allocator.use(0, 0)
    allocator.reset_peak_memory_stats()
    creeps = rank == slow_rank(world) and window >= 2
    allocated = (10 + (window - 1 if creeps else 0)) * GIB
    reserved = 76 * GIB if creeps and window == 3 else 40 * GIB
    allocator.use(allocated, reserved)
    steps(cap, "memory", {"data": 0.005, "forward": 0.060, "backward": 0.035})


def memory_some(cap: Capture, rank: int, world: int, window: int) -> None:
    """Rank r > 0 peaks at r + 1 GiB allocated in 40 GiB reserved; rank 0 reads no device."""
    allocator = ALLOCATOR[0]
    allocator.use(0, 0)
    allocator.reset_peak_memory_stats()
    allocator.use((rank + 1) * GIB, 40 * GIB)
    steps(cap, "memory_some", {"data": 0.005, "forward": 0.060, "backward": 0.035})


ALLOCATOR: list[Allocator] = []  # the stand-in for torch's CUDA allocator, once installed

Scenario = Callable[[Capture, int, int, int], None]
SCENARIOS: dict[str, tuple[Scenario, int, dict[str, Any]]] = {
    "healthy": (healthy, 2, {"wait_sections": ("backward",)}),
    "input_bound": (input_bound, 1, {"wait_sections": ("backward",)}),
    "slow_forward": (slow_forward, 2, {"wait_sections": ("backward",)}),
    "slow_data": (slow_data, 2, {"wait_sections": ("backward",)}),
    "no_wait_section": (no_wait_section, 1, {}),
    # untraced but for the step after each window that names a chronic straggler
    "chronic": (chronic, 10, {"wait_sections": ("backward",), "trace_every": 0, "run_id": "j"}),
    "marked_wait": (marked_wait, 2, {}),
    "throughput_drop": (throughput_drop, 6, {"wait_sections": ("backward",)}),
    # windows of every timer (`lt.reset`): those that carry memory
    "memory": (memory, 4, {"wait_sections": ("backward",), "device_memory": True}),
    # rank 0 with device_memory=False (set in `main`): no device figure there
    "memory_some": (memory_some, 1, {"wait_sections": ("backward",), "device_memory": True}),
}


def traced_laps(cap: Capture, name: str) -> list[list[Any]]:
    """Return `[step, trace id]` of every traced lap of timer `name`, in step order."""
    laps = [
        [(s.attributes or {}).get("looptrace.step"), f"{s.context.trace_id:032x}"]
        for s in cap.finished_spans()
        if s.name == name and s.context is not None
    ]
    return sorted(laps)


def window_result(snapshot: Any) -> dict[str, Any]:
    """Return a window's warnings and worse, its infos, straggler, slowest/fastest rank per path."""
    assert snapshot.across_ranks is not None
    return {
        "findings": [
            {k: v for k, v in f.to_dict().items() if k != "evidence"}
            for f in snapshot.diagnosis()
            if f.severity != "info"
        ],
        "infos": [
            [f.kind, f.path, f.rank]
            for f in snapshot.diagnosis(min_severity="info")
            if f.severity == "info"
        ],
        "straggler": None if snapshot.straggler is None else snapshot.straggler.to_dict(),
        "ranks": {
            path: [spread.total.slowest_rank, spread.total.fastest_rank]
            for path, spread in snapshot.across_ranks.items()
        },
        "memory": None
        if snapshot.memory_across_ranks is None
        else {k: v.to_dict() for k, v in snapshot.memory_across_ranks.items()},
    }


def main(store: str, out: str) -> None:
    """Run every scenario on this rank and write what each window's reset returned."""
    info = RankInfo.from_env()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    ALLOCATOR.append(Allocator().install(setattr, torch.cuda))
    results: dict[str, Any] = {}
    for name, (run, windows, options) in SCENARIOS.items():
        chosen = {**options, "device_memory": info.rank != 0} if name == "memory_some" else options
        cap = capture(rank=info, **chosen)
        results[name] = []
        for window in range(windows):
            run(cap, info.rank, info.world_size, window)
            timer = cap.lt if name.startswith("memory") else cap.lt.timer(name)
            snapshot = timer.reset(across_ranks=True)
            results[name].append(window_result(snapshot))
        cap.lt.shutdown()
        results[f"{name}_traced"] = traced_laps(cap, name)
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as file:
        json.dump(results, file)


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main(*sys.argv[1:])
