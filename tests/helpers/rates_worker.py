"""One rank of a real torch.distributed (gloo, CPU) job, run by tests/test_distributed_rates.py.

Usage: ``python rates_worker.py STORE OUT SNAPSHOTS`` with ``RANK`` and ``WORLD_SIZE`` set as
torchrun sets them, and ``LOCAL_RANK=0`` (each rank names its own Prometheus port). The rank
drives a looptrace on a fake clock through the windows of `WINDOWS`, each closed by
``lt.reset(across_ranks=True)``; it serves Prometheus and writes its snapshot file to
SNAPSHOTS. Per window it writes to OUT as JSON the window's `rates_across_ranks`, its
throughput metrics across ranks (`as_metrics`), the collective calls and bytes its reduce
moved, and the job's throughput series it serves (OTLP through an in-memory reader, and a
scrape of its Prometheus endpoint).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from prometheus_client.parser import text_string_to_metric_families

from looptrace import RankInfo
from looptrace._distributed import collectives as _collectives
from looptrace.testing import Capture, capture

STEPS = 5  # laps of 0.1 s: every window is 0.5 s of wall time
ONLY = 1  # the rank that counts "tokens", a unit no other rank counts
JOB_FAMILIES = (
    "looptrace_job_items_window_rate",
    "looptrace_job_items_window_rank_rate",
    "looptrace_job_items_slowest_rank",
)


def laps(cap: Capture, counts: dict[str, float]) -> None:
    """Run `STEPS` laps of `root.train` (0.1 s of forward each), counting `counts` a lap."""
    train = cap.lt.timer("train")
    for _ in range(STEPS):
        train.record()
        for unit, n in counts.items():
            train.count(unit, n)
        train.record("forward")
        cap.clock.advance(0.1)
    train.stop()


def counted(cap: Capture, rank: int) -> None:
    """Rank r counts (r + 1) x 100 samples a lap; rank `ONLY` also 64 tokens a lap."""
    laps(cap, {"samples": (rank + 1) * 100, **({"tokens": 64} if rank == ONLY else {})})


def some(cap: Capture, rank: int) -> None:
    """Rank 0 counts nothing; rank r > 0 counts (r + 1) x 100 samples a lap."""
    laps(cap, {} if rank == 0 else {"samples": (rank + 1) * 100})


def tie(cap: Capture, rank: int) -> None:
    """Every rank counts 100 samples a lap."""
    laps(cap, {"samples": 100})


def none(cap: Capture, rank: int) -> None:
    """No rank counts anything."""
    laps(cap, {})


WINDOWS: dict[str, Callable[[Capture, int], None]] = {
    "counted": counted,
    "again": counted,  # the same (path, unit) pairs: the table is agreed, only the reduce moves
    "some": some,
    "tie": tie,
    "none": none,
}


def free_port() -> int:
    """Return a port the OS reports free on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scraped(port: int) -> list[list[Any]]:
    """Return the samples of the job's throughput families: [name, labels, value], sorted."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = [
        [sample.name, dict(sample.labels), sample.value]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in JOB_FAMILIES
    ]
    return sorted(found, key=json.dumps)


def pushed(cap: Capture) -> list[list[Any]]:
    """Return the job's throughput points a metric reader gets: [name, unit, labels, value]."""
    data = cap.metrics.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name.startswith("looptrace.job.items"):
                    found.extend(
                        [metric.name, metric.unit, dict(point.attributes or {}), point.value]
                        for point in metric.data.data_points
                    )
    return sorted(found, key=json.dumps)


def main(store: str, out: str, snapshots: str) -> None:
    """Join the job, run every window, write the results, leave the job."""
    info = RankInfo.from_env()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    port = free_port()
    cap = capture(rank=info, trace_every=0, prometheus=f"127.0.0.1:{port}", snapshot_file=snapshots)
    results: dict[str, Any] = {}
    for name, window in WINDOWS.items():
        window(cap, info.rank)
        before = (_collectives.TRAFFIC.calls, _collectives.TRAFFIC.bytes)
        snapshot = cap.lt.reset(across_ranks=True)
        after = (_collectives.TRAFFIC.calls, _collectives.TRAFFIC.bytes)
        spreads = snapshot.rates_across_ranks
        results[name] = {
            "rates_across_ranks": None
            if spreads is None
            else {p: {u: s.to_dict() for u, s in units.items()} for p, units in spreads.items()},
            "metrics": {
                k: v
                for k, v in snapshot.as_metrics().items()
                if k.endswith((".job", ".job_ranks", "_rank"))
                and (".samples" in k or ".tokens" in k)
            },
            "traffic": {"calls": after[0] - before[0], "bytes": after[1] - before[1]},
            "pushed": pushed(cap),
            "scraped": scraped(port),
        }
    cap.lt.shutdown()
    dist.barrier()  # no rank tears gloo down while another still talks to it
    dist.destroy_process_group()
    with open(out, "w") as file:
        json.dump(results, file)


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main(*sys.argv[1:])
