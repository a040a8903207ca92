"""Scale, part 4: the Prometheus series a whole job serves, counted on real endpoints.

N gloo rank processes (2 to 16) each run looptrace with its Prometheus endpoint, time SECTIONS
sections per step (rank r a little slower than rank r - 1, so that the slowest ranks are
well defined), close WINDOWS windows with `reset(across_ranks=True)` and scrape their own
endpoint. Each scrape's series are counted, per rank and per family, at the defaults
(`detail_ranks=8`: the job's histograms on rank 0, full detail on the 8 slowest ranks, a few
series on every other rank) and as before (`detail_ranks="all"`: full detail on every rank).
The job's totals are then extrapolated from the largest world measured: the job rank's
series, the detail ranks' and the others' stay what they are, only how many ranks there are
of each kind changes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from scale_common import EXTRAPOLATE, SECTIONS, STEP_S, WORKER

WINDOWS = 3
DESIGNS = {"defaults": "8", "today (detail_ranks='all')": "all"}
GOAL = 100_000  # series of a 16,384-rank job at the defaults


def series_worker(store: str, out: str, detail: str) -> None:
    """One rank: SECTIONS sections per step, WINDOWS cross-rank windows, scrape, count."""
    import torch.distributed as dist

    import looptrace
    from looptrace.testing import FakeClock

    info = looptrace.RankInfo.from_env()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    clock = FakeClock()
    lt = looptrace.configure(
        clock=clock,
        rank=info,
        prometheus=f"127.0.0.1:{port}",
        traces_exporter="none",
        detail_ranks=detail if detail == "all" else int(detail),
    )
    train = lt.timer("train")
    for _ in range(WINDOWS):
        for _ in range(3):
            for i in range(SECTIONS):
                train.record(f"section{i:02d}")
                clock.advance(STEP_S / SECTIONS + (0.001 * info.rank if i == 0 else 0.0))
            train.record()
        train.stop()
        snapshot = lt.reset(across_ranks=True)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    lt.shutdown()
    dist.barrier()
    dist.destroy_process_group()
    families: dict[str, int] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            families[name] = families.get(name, 0) + 1
    job = snapshot.job
    result = {
        "rank": info.rank,
        "detail": None if job is None else job.detail,
        "serves_job": None if job is None else job.serves_job,
        "families": families,
    }
    Path(out).write_text(json.dumps(result))


def run_world(world: int, detail: str) -> list[dict[str, Any]]:
    """Run `world` rank processes and return each one's counted scrape, in rank order."""
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for rank in range(world):
            env = {
                **os.environ,
                "RANK": str(rank),
                "LOCAL_RANK": "0",
                "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world),
                "GLOO_SOCKET_IFNAME": "lo",
            }
            command = [*WORKER, "--series-worker", f"{tmp}/store", f"{tmp}/{rank}", detail]
            procs.append(subprocess.Popen(command, env=env))
        deadline = time.monotonic() + 600
        for proc in procs:
            proc.wait(timeout=max(deadline - time.monotonic(), 1))
            if proc.returncode != 0:
                raise RuntimeError(f"a rank of a {world}-rank job failed")
        return [json.loads(Path(f"{tmp}/{rank}").read_text()) for rank in range(world)]


def _kinds(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the series of the job rank, of a detail rank and of any other rank."""
    job_rank = next(r for r in ranks if r["serves_job"])
    job_series = sum(n for f, n in job_rank["families"].items() if f.startswith("looptrace_job_"))
    own = [
        sum(n for f, n in r["families"].items() if not f.startswith("looptrace_job_"))
        for r in ranks
    ]
    detail = [n for r, n in zip(ranks, own, strict=True) if r["detail"]]
    others = [n for r, n in zip(ranks, own, strict=True) if not r["detail"]]
    return {
        "job_series": job_series,
        "detail_ranks": len(detail),
        "per_detail_rank": max(detail, default=0),
        "per_other_rank": max(others, default=0),
    }


def measure_job_series(worlds: list[int]) -> dict[str, Any]:
    """Count every rank's served series for each world and design; extrapolate the largest."""
    measured: dict[str, dict[int, Any]] = {}
    for design, detail in DESIGNS.items():
        measured[design] = {}
        for world in worlds:
            ranks = run_world(world, detail)
            measured[design][world] = {
                "total": sum(sum(r["families"].values()) for r in ranks),
                **_kinds(ranks),
            }
    extrapolated: dict[str, dict[int, Any]] = {}
    for design, by_world in measured.items():
        kinds = by_world[max(worlds)]
        extrapolated[design] = {}
        if DESIGNS[design] != "all" and kinds["detail_ranks"] >= max(worlds):
            continue  # every measured rank served detail: nothing says what the others serve
        for world in EXTRAPOLATE:
            detail = kinds["detail_ranks"] if DESIGNS[design] != "all" else world
            total = (
                kinds["job_series"]
                + detail * kinds["per_detail_rank"]
                + (world - detail) * kinds["per_other_rank"]
            )
            extrapolated[design][world] = {
                "total": total,
                "per_rank_mean": total / world,
                "within_goal": total <= GOAL,
            }
    return {"sections": SECTIONS, "measured": measured, "extrapolated": extrapolated}


def print_job_series(report: dict[str, Any]) -> None:
    """Print the measured and extrapolated series of a job."""
    print(f"\nPrometheus series of a whole job, {report['sections']} sections (scraped for real)")
    print(
        f"{'design':<28} {'world':>6} {'total':>9} {'job rank':>9} {'detail':>7} "
        f"{'per detail':>11} {'per other':>10}"
    )
    for design, by_world in report["measured"].items():
        for world, m in by_world.items():
            print(
                f"{design:<28} {world:>6} {m['total']:>9,} {m['job_series']:>9,} "
                f"{m['detail_ranks']:>7} {m['per_detail_rank']:>11,} {m['per_other_rank']:>10,}"
            )
    print(f"extrapolated (goal: at most {GOAL:,} series at 16,384 ranks, at the defaults)")
    for design, by_world in report["extrapolated"].items():
        if not by_world:
            print(f"  {design:<28} not extrapolated: every rank measured served full detail")
        for world, e in by_world.items():
            print(
                f"  {design:<28} {world:>6} ranks: {e['total']:>12,} series, "
                f"{e['per_rank_mean']:.1f} per rank on average"
                + ("" if e["within_goal"] else "  (over the goal)")
            )
