"""A real 2-rank torch.distributed (gloo, CPU) job that writes looptrace's span and snapshot files.

The ranks run tests/helpers/gloo_files_worker.py; `start` launches them, `finish` waits for them
with a hang guard and checks that each exited cleanly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import gloo_files_worker
from tests.helpers.processes import finish_ranks

WORKER = Path(gloo_files_worker.__file__)
JOB_TIMEOUT_S = 180  # a hang guard, not a speed claim


def start(directory: Path, store: Path, go: Path | None = None) -> list[subprocess.Popen[bytes]]:
    """Start the 2 ranks, writing into `directory`; with `go`, each window waits for go/<k>."""
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "GLOO_SOCKET_IFNAME": "lo",
        }
        command = [sys.executable, str(WORKER), str(store), str(directory)]
        command += [] if go is None else [str(go)]
        procs.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    return procs


def finish(procs: list[subprocess.Popen[bytes]]) -> None:
    """Wait for the ranks (killing them past the guard) and check that each exited with 0."""
    finish_ranks(procs, JOB_TIMEOUT_S)


def kill(procs: list[subprocess.Popen[bytes]]) -> None:
    """End the ranks still running (a test that failed before they finished)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def run(directory: Path, store: Path) -> None:
    """Run the whole job, its files written into `directory`."""
    finish(start(directory, store))
