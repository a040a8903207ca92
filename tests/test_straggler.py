"""The rank the others wait for, and the diagnosis across ranks: real gloo ranks on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch.distributed", reason="needs torch (the test extra)")

from tests.helpers import straggler_worker
from tests.helpers.allocator import GIB
from tests.helpers.processes import run_ranks
from tests.helpers.straggler_worker import CHRONIC_SLOW, slow_rank

WORKER = Path(straggler_worker.__file__)
JOB_TIMEOUT_S = 180
ACTION = "more DataLoader workers, pin_memory, prefetching, or lighter transforms"


def run_job(world: int, workdir: Path) -> list[dict[str, list[dict[str, Any]]]]:
    """Run `world` ranks of tests/helpers/straggler_worker.py and return each one's results."""
    return run_ranks(WORKER, world, workdir, timeout_s=JOB_TIMEOUT_S)


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
            "message": "30% of the median rank's root.input_bound lap waits for input in "
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
    first, window = alike(results, "slow_forward")
    assert first["findings"] == []  # one window is not yet a persistent straggler
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
    first, window = alike(results, "slow_data")
    assert [f for f in first["findings"] if f["kind"] == "straggler"] == []
    found = [f for f in window["findings"] if f["kind"] == "straggler"]
    assert found == [straggler_finding("slow_data", slow_rank(world), "data", "31%")]


def test_without_wait_sections_no_straggler_is_named(job: Any) -> None:
    """No wait section known: no straggler warning, one info finding naming no rank or path."""
    _, results = job
    [window] = alike(results, "no_wait_section")
    assert window["findings"] == []
    assert [i for i in window["infos"] if i[0] == "straggler"] == [["straggler", None, None]]


def test_a_chronic_straggler_is_named_from_its_sixth_window_of_ten(job: Any) -> None:
    """Slow in 7 of 10 windows: chronic from the 6th such window on, with its count."""
    world, results = job
    slow = slow_rank(world)
    windows = alike(results, "chronic")
    chronic = [(w["straggler"]["chronic_rank"], w["straggler"]["chronic_count"]) for w in windows]
    assert chronic == [(None, 0)] * 6 + [(slow, 6), (slow, 6), (slow, 7), (slow, 7)]
    kinds = [[(f["kind"], f["rank"]) for f in w["findings"]] for w in windows]
    expected = [  # a straggler warns from its second window in a row
        ([("straggler", slow)] if {window - 1, window} <= CHRONIC_SLOW else [])
        + ([("chronic_straggler", slow)] if window >= 6 else [])
        for window in range(10)
    ]
    assert kinds == expected


def test_a_chronic_straggler_gets_its_next_step_traced_on_every_rank(job: Any) -> None:
    """Untraced otherwise, the step after each window naming the chronic straggler is traced.

    Windows 6, 7 and 8 name it and end after steps 34, 39, 44: steps 35, 40 and 45 are
    traced on every rank, each rank's spans of a step in the same trace.
    """
    _, results = job
    traced = [r["chronic_traced"] for r in results]
    assert [step for step, _ in traced[0]] == [35, 40, 45]
    assert all(t == traced[0] for t in traced)


def test_a_section_marked_wait_true_names_the_straggler(job: Any) -> None:
    """record("allreduce", wait=True) marks the wait as wait_sections would: slow rank named."""
    world, results = job
    slow = slow_rank(world)
    _, window = alike(results, "marked_wait")
    assert window["findings"] == [straggler_finding("marked_wait", slow, "forward", "31%")]
    assert window["straggler"]["by"] == "wait"


def test_a_throughput_drop_is_named_on_every_rank(job: Any) -> None:
    """A rank 50 ms slower a step from window 4: every rank's rate drops a third; it is named.

    One slow window is not yet either finding: both warn from the second in a row.
    """
    world, results = job
    slow = slow_rank(world)
    path = "root.throughput_drop"
    for rank, result in enumerate(results):
        windows = result["throughput_drop"]
        assert [w["findings"] for w in windows[:5]] == [[]] * 5
        assert [(f["kind"], f["rank"]) for f in windows[5]["findings"]] == [
            ("straggler", slow),
            ("throughput_drop", rank),
        ]
        assert windows[5]["findings"][1] == {
            "kind": "throughput_drop",
            "severity": "warning",
            "path": path,
            "rank": rank,
            "message": f"{path} counted 213.3 samples/s, 33% below the run's sustained 320 "
            "samples/s (the median of 3 windows before it)",
            "action": "compare this window's sections with an earlier one's: which grew, and "
            "what else ran then",
        }


def test_memory_creep_and_pressure_name_the_rank_that_has_them(job: Any) -> None:
    """The slow rank's device peak creeps 1 GiB a window and reserves 95 %: it alone says so."""
    world, results = job
    slow = slow_rank(world)
    creep_action = (
        "look for tensors kept across steps: a loss kept with its graph, growing lists or caches"
    )
    for rank, result in enumerate(results):
        found = [w["findings"] for w in result["memory"]]
        if rank != slow:
            assert found == [[]] * 4
            continue
        assert found[:2] == [[], []]
        assert found[2] == [
            {
                "kind": "memory_creep",
                "severity": "warning",
                "path": None,
                "rank": slow,
                "message": "device memory creeps: the window's peak allocated 11.00 GiB is "
                "1.00 GiB (10%) above the 10.00 GiB of 1 window earlier",
                "action": creep_action,
            }
        ]
        assert found[3] == [
            {
                "kind": "memory_creep",
                "severity": "warning",
                "path": None,
                "rank": slow,
                "message": "device memory creeps: the window's peak allocated 12.00 GiB is "
                "2.00 GiB (20%) above the 10.00 GiB of 2 windows earlier",
                "action": creep_action,
            },
            {
                "kind": "memory_pressure",
                "severity": "warning",
                "path": None,
                "rank": slow,
                "message": "the window's peak reserved 76.00 GiB is 95% of the device's 80.00 GiB",
                "action": "a smaller batch or sequence, activation checkpointing, or "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
            },
        ]


def spread(low: float, high: float, mean: float, most: int, least: int) -> dict[str, Any]:
    """Return a `RankSpread` as a dict: `most` holds `high`, `least` holds `low`."""
    return {"min": low, "max": high, "mean": mean, "slowest_rank": most, "fastest_rank": least}


def test_memory_across_ranks_names_the_rank_with_the_most(job: Any) -> None:
    """Every rank gets each device figure's exact min, max, mean and the ranks holding them."""
    world, results = job
    slow = slow_rank(world)
    windows = [[w["memory"] for w in r["memory"]] for r in results]
    assert all(w == windows[0] for w in windows)  # reduced: the same on every rank
    last = windows[0][3]
    # window 3: the slow rank peaks at 12 GiB in 76 GiB reserved, every other rank 10 in 40
    assert last["device_peak_allocated"] == spread(
        10 * GIB, 12 * GIB, (10 * (world - 1) + 12) * GIB / world, slow, 0
    )
    assert last["device_peak_reserved"] == spread(
        40 * GIB, 76 * GIB, (40 * (world - 1) + 76) * GIB / world, slow, 0
    )
    for figure in ("host_rss", "host_peak_rss"):  # the real process's: every rank measures it
        host = last[figure]
        assert 0 < host["min"] <= host["mean"] <= host["max"]
        assert {host["slowest_rank"], host["fastest_rank"]} <= set(range(world))
    # a timer's own window reads no memory: nothing to spread, no figure as 0
    assert {json.dumps(w["memory"]) for w in alike(results, "healthy")} == {"{}"}


def test_a_figure_a_rank_did_not_measure_counts_nowhere(job: Any) -> None:
    """Rank 0 reads no device figure: min and mean come from ranks 1.. alone, not from a 0."""
    world, results = job
    [window] = [w["memory"] for w in results[0]["memory_some"]]
    assert all([w["memory"] for w in r["memory_some"]] == [window] for r in results)
    measured = range(1, world)
    assert window["device_peak_allocated"] == spread(
        2 * GIB, world * GIB, sum(r + 1 for r in measured) * GIB / len(measured), world - 1, 1
    )
    # a tie: the lowest rank that measured it, not rank 0
    assert window["device_peak_reserved"] == spread(40 * GIB, 40 * GIB, 40 * GIB, 1, 1)
    assert set(window) == {
        "host_rss",
        "host_peak_rss",
        "device_peak_allocated",
        "device_peak_reserved",
    }
