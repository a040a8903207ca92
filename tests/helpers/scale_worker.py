"""One rank of a real torch.distributed (gloo, CPU) job, run by tests/test_job_metrics.py.

Usage: ``python scale_worker.py STORE OUT SCENARIO DETAIL_RANKS JOB_RANK`` with ``RANK`` and
``WORLD_SIZE`` set as torchrun sets them. The rank serves Prometheus on a port of its own,
drives a looptrace on a fake clock through a few windows, each closed by
``reset(across_ranks=True)``, scrapes its own endpoint after each one and writes the scrapes
(and each window's `JobView` flags) to OUT as JSON.

Scenarios: ``sum`` (every rank times steps of its own lengths, one rank more sections than
the others); ``moving`` (window `i`: rank `i % world` is the slowest, rank `(i + 1) % world`
the next slowest, the others alike).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.request
from typing import Any

import torch.distributed as dist
from prometheus_client.parser import text_string_to_metric_families

import looptrace
from looptrace import RankInfo
from looptrace.testing import FakeClock

WINDOWS = {"sum": 3, "moving": 5}


def free_port() -> int:
    """Return a port the OS reports free on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    """Return every sample of this rank's endpoint: (name, labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def summed_window(lt: Any, clock: FakeClock, rank: int, window: int) -> None:
    """Time steps whose lengths differ by rank and window, over buckets; rank 1 evaluates."""
    train = lt.timer("train")
    for step in range(3 + rank):
        train.record("data")
        clock.advance(0.001 * (1 + rank + step))
        train.record("forward")
        clock.advance(0.010 * (1 + (rank * 7 + step * 3 + window) % 11))
        train.record()
    train.stop()
    if rank == 1:  # a path only one rank has
        with lt.timer("eval").section("batch"):
            clock.advance(0.3)


def moving_window(train: Any, clock: FakeClock, rank: int, window: int, world: int) -> None:
    """Rank `window % world` is 200 ms slower per step, rank `(window + 1) % world` 100 ms."""
    extra = {window % world: 0.200, (window + 1) % world: 0.100}.get(rank, 0.0)
    for _ in range(3):
        train.record("data")
        clock.advance(0.005)
        train.record("forward")
        clock.advance(0.050 + extra)
        train.record()
    train.stop()


def main(store: str, out: str, scenario: str, detail_ranks: str, job_rank: str) -> None:
    """Join the job, run the windows, scrape after each, write the scrapes, leave the job."""
    info = RankInfo.from_env()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    port = free_port()
    clock = FakeClock()
    lt = looptrace.configure(
        clock=clock,
        rank=info,
        prometheus=f"127.0.0.1:{port}",
        detail_ranks=detail_ranks if detail_ranks == "all" else int(detail_ranks),
        job_rank=int(job_rank),
    )
    results = []
    for window in range(WINDOWS[scenario]):
        if scenario == "sum":
            summed_window(lt, clock, info.rank, window)
        else:
            moving_window(lt.timer("train"), clock, info.rank, window, info.world_size)
        snapshot = lt.reset(across_ranks=True)
        job = snapshot.job
        results.append(
            {
                "detail": None if job is None else job.detail,
                "serves_job": None if job is None else job.serves_job,
                "samples": scrape(port),
            }
        )
    lt.shutdown()
    dist.barrier()  # no rank tears gloo down while another still talks to it
    dist.destroy_process_group()
    with open(out, "w") as file:
        json.dump(results, file)


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main(*sys.argv[1:])
