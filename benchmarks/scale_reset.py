"""Scale, part 1: `reset(across_ranks=True)` in jobs of 2 to 16 gloo processes.

The all_reduce design next to the all_gather design it replaced (`scale_gathered.py`, kept
for comparison only); times are the median of the slowest rank per round, bytes are counted
at the collective calls. The fits say how the times grow with the world size here.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from scale_common import EXTRAPOLATE, PATHS, WORKER
from scale_gathered import gathered_bytes, gathered_local_ms, gathered_reduce, same_spreads


def section_names() -> list[str]:
    """Return PATHS - 1 section names of a realistic length (the lap itself is the last path)."""
    kinds = ("data", "forward", "backward", "optimizer", "allreduce")
    return [f"layer{i // len(kinds):02d}_{kinds[i % len(kinds)]}" for i in range(PATHS - 1)]


def reset_worker(store: str, out: str, rounds: int) -> None:
    """One rank: time both designs on the same window, alternating which goes first."""
    import torch.distributed as dist

    import looptrace
    from looptrace._distributed import collectives as _collectives
    from looptrace.testing import FakeClock

    info = looptrace.RankInfo.from_env()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    clock = FakeClock()
    lt = looptrace.configure(
        clock=clock, rank=info, traces_exporter="none", metrics_exporter="none", trace_every=0
    )
    train, names = lt.timer("train"), section_names()

    def window() -> Any:
        for name in names:
            train.record(name)
            clock.advance(0.001 * (1 + (info.rank + len(name)) % 5))
        train.record()
        return lt.reset()

    lt.reset(across_ranks=True)  # the first window agrees on the path table: not timed
    _collectives.reduce(window())
    times: dict[str, list[float]] = {"all_reduce": [], "all_gather": []}
    moved: dict[str, list[int]] = {}
    mismatches = 0
    for i in range(rounds):
        snapshot = window()
        order = ["all_reduce", "all_gather"] if i % 2 == 0 else ["all_gather", "all_reduce"]
        results = {}
        for design in order:
            dist.barrier()
            before = (_collectives.TRAFFIC.calls, _collectives.TRAFFIC.bytes)
            gathered = [0, 0]
            start = time.perf_counter_ns()
            if design == "all_reduce":
                results[design] = _collectives.reduce(snapshot)
            else:
                results[design] = gathered_reduce(snapshot, gathered)
            times[design].append((time.perf_counter_ns() - start) / 1e6)
            if design == "all_reduce":
                after = (_collectives.TRAFFIC.calls, _collectives.TRAFFIC.bytes)
                moved[design] = [after[0] - before[0], after[1] - before[1]]
            else:
                moved[design] = gathered
        mismatches += not same_spreads(results["all_reduce"], results["all_gather"])
    dist.barrier()
    dist.destroy_process_group()
    Path(out).write_text(json.dumps({"ms": times, "moved": moved, "mismatches": mismatches}))


def measure_reset(worlds: list[int], rounds: int) -> dict[str, Any]:
    """Run a job per world size; return per design the median of the slowest rank per round."""
    by_world = {}
    for world in worlds:
        with tempfile.TemporaryDirectory() as tmp:
            procs = [
                subprocess.Popen(
                    [*WORKER, "--reset-worker", f"{tmp}/store", f"{tmp}/{r}", str(rounds)],
                    env={
                        **os.environ,
                        "RANK": str(r),
                        "WORLD_SIZE": str(world),
                        "GLOO_SOCKET_IFNAME": "lo",
                        "OMP_NUM_THREADS": "1",
                    },
                )
                for r in range(world)
            ]
            if any(p.wait(timeout=600) for p in procs):
                raise RuntimeError(f"a rank of the {world}-rank job failed")
            ranks = [json.loads(Path(f"{tmp}/{r}").read_text()) for r in range(world)]
        entry: dict[str, Any] = {"mismatches": sum(r["mismatches"] for r in ranks)}
        for design in ("all_reduce", "all_gather"):
            slowest = [max(r["ms"][design][i] for r in ranks) for i in range(rounds)]
            calls, moved = ranks[0]["moved"][design]
            entry[design] = {"ms": statistics.median(slowest), "calls": calls, "bytes": moved}
        by_world[world] = entry
    paths = ["root.train", *(f"root.train.{n}" for n in section_names())]
    local = {world: gathered_local_ms(paths, world, max(1, rounds // 10)) for world in EXTRAPOLATE}
    return {"worlds": by_world, "fits": fits(by_world), "all_gather_local_ms": local}


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Return (a, b) of the least-squares line y = a + b x."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def fits(by_world: dict[int, Any]) -> dict[str, Any]:
    """Fit ms against the world size (linear and log2) and extrapolate both designs."""
    worlds = sorted(by_world)
    result: dict[str, Any] = {}
    paths = ["root.train", *(f"root.train.{n}" for n in section_names())]
    for design in ("all_reduce", "all_gather"):
        ms = [by_world[w][design]["ms"] for w in worlds]
        linear = fit([float(w) for w in worlds], ms)
        log = fit([math.log2(w) for w in worlds], ms)
        at = {}
        for world in EXTRAPOLATE:
            moved = (
                by_world[worlds[-1]][design]["bytes"]
                if design == "all_reduce"
                else gathered_bytes(world, paths)
            )
            at[world] = {
                "ms_linear": linear[0] + linear[1] * world,
                "ms_log2": log[0] + log[1] * math.log2(world),
                "bytes": moved,
            }
        result[design] = {"linear": linear, "log2": log, "at": at}
    return result
