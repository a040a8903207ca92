"""The rank the others wait for, and the diagnosis across ranks: real gloo ranks on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch.distributed", reason="needs torch (the test extra)")

from tests import straggler_worker
from tests.straggler_worker import CHRONIC_SLOW, slow_rank

WORKER = Path(straggler_worker.__file__)
JOB_TIMEOUT_S = 180
ACTION = "more DataLoader workers, pin_memory, prefetching, or lighter transforms"


def run_job(world: int, workdir: Path) -> list[dict[str, list[dict[str, Any]]]]:
    """Run `world` ranks of tests/straggler_worker.py and return each one's results."""
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "GLOO_SOCKET_IFNAME": "lo",
        }
        command = [sys.executable, str(WORKER), str(workdir / "store"), str(workdir / f"{rank}")]
        procs.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    deadline = time.monotonic() + JOB_TIMEOUT_S
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            outputs.append(out.decode(errors="replace"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"a {world}-rank job did not finish in {JOB_TIMEOUT_S} s (a hang)")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{out}"
    return [json.loads((workdir / f"{rank}").read_text()) for rank in range(world)]


@pytest.fixture(scope="module", params=[2, 4], ids=["2-ranks", "4-ranks"])
def job(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, list[dict[str, list[dict[str, Any]]]]]:
    """Return (world, every rank's results) of one job over all scenarios."""
    world = int(request.param)
    return world, run_job(world, tmp_path_factory.mktemp(f"stragglers{world}"))


def alike(results: list[dict[str, list[dict[str, Any]]]], scenario: str) -> list[dict[str, Any]]:
    """Return the windows of `scenario`, asserting that every rank got the same ones."""
    first = results[0][scenario]
    assert all(r[scenario] == first for r in results)
    return first


def straggler_finding(scenario: str, rank: int, section: str, share: str) -> dict[str, Any]:
    """Return the straggler finding of a rank 100 ms over a typical 325 ms outside waits."""
    path = f"root.{scenario}.{section}"
    return {
        "kind": "straggler",
        "severity": "critical",
        "path": path,
        "rank": rank,
        "message": f"rank {rank} makes the others wait (least time in wait sections): "
        f"0.100 s ({share}) over the typical rank; cause {path}",
        "action": f"look at {path} on rank {rank}: its data shard, its device, its host",
    }


def test_a_healthy_run_has_no_warning(job: Any) -> None:
    """Every rank alike: no finding of warning or worse, in any window, on any rank."""
    _, results = job
    windows = alike(results, "healthy")
    assert [w["findings"] for w in windows] == [[], []]
    assert {w["straggler"]["excess_s"] for w in windows} == {0.0}


def test_an_input_bound_run_names_the_data_share(job: Any) -> None:
    """30 % of every rank's lap in data: input_bound, critical, the share and seconds named."""
    _, results = job
    [window] = alike(results, "input_bound")
    assert window["findings"] == [
        {
            "kind": "input_bound",
            "severity": "critical",
            "path": "root.input_bound.data",
            "rank": None,
            "message": "30% of the typical rank's root.input_bound lap waits for input in "
            "root.input_bound.data (0.150 s of 0.500 s)",
            "action": ACTION,
        }
    ]


def test_the_rank_slow_in_forward_is_the_straggler_not_the_waiting_rank(job: Any) -> None:
    """A rank slowed in forward is the straggler, cause forward, and backward's fastest rank.

    The ranks waiting for it in backward keep `slowest_rank` of backward.
    """
    world, results = job
    slow = slow_rank(world)
    [window] = alike(results, "slow_forward")
    assert window["findings"] == [straggler_finding("slow_forward", slow, "forward", "31%")]
    straggler = window["straggler"]
    assert (straggler["rank"], straggler["by"], straggler["cause"]) == (
        slow,
        "wait",
        "root.slow_forward.forward",
    )
    assert straggler["excess_s"] == pytest.approx(0.100)
    assert straggler["typical_s"] == pytest.approx(0.325)
    assert straggler["excess_by_path"] == pytest.approx(
        {
            "root.slow_forward.data": 0.0,
            "root.slow_forward.forward": 0.100,
        }
    )
    waiting = 0 if slow != 0 else 1
    assert window["ranks"]["root.slow_forward.backward"] == [waiting, slow]
    assert window["ranks"]["root.slow_forward.forward"] == [slow, waiting]


def test_the_rank_slow_in_data_is_the_straggler_with_cause_data(job: Any) -> None:
    """Rank slowed 20 ms a step in data: the straggler, cause data."""
    world, results = job
    [window] = alike(results, "slow_data")
    found = [f for f in window["findings"] if f["kind"] == "straggler"]
    assert found == [straggler_finding("slow_data", slow_rank(world), "data", "31%")]


def test_without_wait_sections_the_most_lap_time_names_the_straggler(job: Any) -> None:
    """No wait section marked: the rank with the most lap time is named, by that rule."""
    world, results = job
    slow = slow_rank(world)
    [window] = alike(results, "no_wait_section")
    path = "root.no_wait_section.forward"
    assert window["findings"] == [
        {
            "kind": "straggler",
            "severity": "warning",
            "path": path,
            "rank": slow,
            "message": f"rank {slow} makes the others wait (most lap time outside wait "
            f"sections): 0.100 s (20%) over the typical rank; cause {path}",
            "action": f"look at {path} on rank {slow}: its data shard, its device, its host",
        }
    ]


def test_a_chronic_straggler_is_named_from_its_sixth_window_of_ten(job: Any) -> None:
    """Slow in 7 of 10 windows: chronic from the 6th such window on, with its count."""
    world, results = job
    slow = slow_rank(world)
    windows = alike(results, "chronic")
    chronic = [(w["straggler"]["chronic_rank"], w["straggler"]["chronic_count"]) for w in windows]
    assert chronic == [(None, 0)] * 6 + [(slow, 6), (slow, 6), (slow, 7), (slow, 7)]
    kinds = [[(f["kind"], f["rank"]) for f in w["findings"]] for w in windows]
    expected = [
        ([("straggler", slow)] if window in CHRONIC_SLOW else [])
        + ([("chronic_straggler", slow)] if window >= 6 else [])
        for window in range(10)
    ]
    assert kinds == expected
