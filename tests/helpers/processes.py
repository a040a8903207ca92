"""Child processes of the tests: a bare environment that still runs the code under test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest


def bare_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return `PATH`, the `PYTHONPATH` of this run (if any) and `extra`, nothing else.

    A child then imports the same looptrace as the test (a source tree on `PYTHONPATH`, or the
    installed one), and no `OTEL_*`/`LOOPTRACE_*` setting of the developer's shell leaks in.
    """
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update(extra or {})
    return env


def finish_ranks(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """Wait for a job's ranks (killing them past the hang guard); each must exit with 0."""
    deadline = time.monotonic() + timeout_s
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            outputs.append(out.decode(errors="replace"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"a {len(procs)}-rank job did not finish in {timeout_s} s (a hang)")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{out}"


def run_ranks(
    worker: Path,
    world: int,
    workdir: Path,
    args: Sequence[str] = (),
    *,
    timeout_s: float,
    one_host_each: bool = False,
) -> list[Any]:
    """Run `world` gloo ranks of `worker` to the end; return each one's JSON result, rank order.

    Each rank runs `worker STORE RESULT *args`, joined through the file store
    `workdir/store`, writing its result to `workdir/<rank>`. `one_host_each`: every rank
    has `LOCAL_RANK` 0 (e.g. so that each names its own Prometheus port).
    """
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": "0" if one_host_each else str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "GLOO_SOCKET_IFNAME": "lo",
        }
        command = [sys.executable, str(worker), str(workdir / "store"), str(workdir / f"{rank}")]
        procs.append(
            subprocess.Popen(
                [*command, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        )
    finish_ranks(procs, timeout_s)
    return [json.loads((workdir / f"{rank}").read_text()) for rank in range(world)]
