"""Real DistributedDataParallel jobs, 4 gloo ranks on the CPU: each fault gets its right answer.

Each scenario of tests/helpers/ddp_worker.py injects one fault as a sleep on the real clock;
the assertions read the findings' kind, severity, path and rank only, never their text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch.distributed", reason="needs torch (the test extra)")

from tests.helpers import ddp_worker
from tests.helpers.processes import run_ranks

WORLD = 4
WORKER = Path(ddp_worker.__file__)
JOB_TIMEOUT_S = 300

Findings = list[list[list[Any]]]  # per window: [kind, severity, path, rank]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Findings]]:
    """Return every rank's findings per scenario and window of one 4-rank DDP job."""
    workdir = tmp_path_factory.mktemp("ddp")
    return run_ranks(WORKER, WORLD, workdir, timeout_s=JOB_TIMEOUT_S)


def _kinds(
    windows: Findings, *, severities: tuple[str, ...] = ("critical", "warning")
) -> list[list[tuple[str, str | None, int | None]]]:
    return [[(f[0], f[2], f[3]) for f in window if f[1] in severities] for window in windows]


def test_a_healthy_ddp_run_is_quiet(job: list[dict[str, Findings]]) -> None:
    """8 windows of 20 steps, reset across ranks inside a lap: no warning on any rank."""
    for rank, result in enumerate(job):
        assert _kinds(result["healthy"]) == [[]] * 8, f"rank {rank}"


def test_an_input_bound_job_is_named_job_wide(job: list[dict[str, Findings]]) -> None:
    """Every rank's loader slow: input_bound on root.input_bound.data, no rank, every window."""
    for result in job:
        for window in _kinds(result["input_bound"]):
            assert ("input_bound", "root.input_bound.data", None) in window


def test_one_slow_loader_is_that_ranks_straggler_not_job_wide_input(
    job: list[dict[str, Findings]],
) -> None:
    """Rank 1's loader slow: from the second window, straggler rank 1 in data; no input_bound."""
    for result in job:
        windows = _kinds(result["slow_loader"])
        assert all(kind != "input_bound" for window in windows for kind, _, _ in window)
        assert [w for w in windows if w] == [
            [("straggler", "root.slow_loader.data", ddp_worker.SLOW_LOADER_RANK)]
        ] * 2
        assert windows[0] == []


def test_a_rank_slow_in_forward_is_the_straggler(job: list[dict[str, Findings]]) -> None:
    """Rank 2 slowed in forward: the straggler from the second window, cause forward."""
    for result in job:
        windows = _kinds(result["slow_forward"])
        straggler = ("straggler", "root.slow_forward.forward", ddp_worker.SLOW_FORWARD_RANK)
        assert windows == [[], [straggler], [straggler]]


def test_eval_and_checkpoint_by_their_names_are_time_outside_the_steps(
    job: list[dict[str, Findings]],
) -> None:
    """Sections named `eval` and `checkpoint`, no roles=: outside_laps on every rank."""
    for rank, result in enumerate(job):
        for window in _kinds(result["eval_checkpoint"]):
            assert ("outside_laps", "root.eval_checkpoint", rank) in window


def test_a_drop_that_lasts_stays_reported(job: list[dict[str, Findings]]) -> None:
    """Every rank slower from window 3 on: throughput_drop from its second window, 4 and 5."""
    for rank, result in enumerate(job):
        drops = [
            [f for f in window if f[0] == "throughput_drop"]
            for window in _kinds(result["lasting_drop"])
        ]
        drop = [("throughput_drop", "root.lasting_drop", rank)]
        assert drops == [[], [], [], [], drop, drop]


def test_host_memory_creep_names_the_leaking_rank(job: list[dict[str, Findings]]) -> None:
    """Rank 3 keeps 80 MiB a window: memory_creep on rank 3 once over 256 MiB; others quiet."""
    for rank, result in enumerate(job):
        creeps = [
            [f for f in window if f[0] == "memory_creep"] for window in _kinds(result["host_leak"])
        ]
        if rank == ddp_worker.LEAKING_RANK:
            assert creeps[-1] == [("memory_creep", None, rank)]
            assert creeps[:4] == [[]] * 4
        else:
            assert creeps == [[]] * 6
