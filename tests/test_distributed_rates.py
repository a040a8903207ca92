"""Throughput across ranks (`snapshot.rates_across_ranks`): real gloo ranks on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch.distributed", reason="needs torch (the test extra)")

from looptrace._cli import main
from tests.helpers import rates_worker
from tests.helpers.processes import run_ranks
from tests.helpers.rates_worker import ONLY

WORKER = Path(rates_worker.__file__)
JOB_TIMEOUT_S = 180
# Per rank and window: the header, 2 paths (root.train, root.train.forward) at 704 bytes,
# 784 bytes per rank (straggler, detail ranks, memory), and per (path, unit) agreed 7 values.
STEADY = {"calls": 4, "bytes": 32 + 2 * 704 + 784 + 2 * 7 * 8}

Job = tuple[int, list[dict[str, Any]], Path]


def run_job(world: int, workdir: Path) -> list[dict[str, Any]]:
    """Run `world` ranks of tests/helpers/rates_worker.py and return each one's results."""
    snapshots = str(workdir / "snapshots.jsonl")  # each rank's: snapshots.rank<N>.jsonl
    return run_ranks(
        WORKER, world, workdir, [snapshots], timeout_s=JOB_TIMEOUT_S, one_host_each=True
    )


@pytest.fixture(scope="module", params=[2, 4], ids=["2-ranks", "4-ranks"])
def job(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Job:
    """Return (world, every rank's results, the job's folder) of one job over all windows."""
    world = int(request.param)
    workdir = tmp_path_factory.mktemp(f"rates{world}")
    return world, run_job(world, workdir), workdir


def alike(results: list[dict[str, Any]], window: str, key: str) -> Any:
    """Return `key` of `window`, asserting that every rank got the same."""
    first = results[0][window][key]
    assert all(r[window][key] == first for r in results)
    return first


def spread(
    ranks: int, total: float, per_s: float, low: tuple[int, float], high: tuple[int, float]
) -> dict[str, Any]:
    """Return a `RateSpread` as a dict: rank `low[0]` counted slowest, at `low[1]` a second."""
    return {
        "ranks": ranks,
        "total": total,
        "per_s": per_s,
        "min": low[1],
        "max": high[1],
        "mean": per_s / ranks,
        "slowest_rank": low[0],
        "fastest_rank": high[0],
    }


def test_the_job_rate_is_the_sum_and_the_slowest_rank_counts_least(job: Job) -> None:
    """Rank r counts (r+1) x 1000 a second: the job sums them; rank 0 slowest, the last fastest."""
    world, results, _ = job
    summed = world * (world + 1) // 2  # 1 + 2 + ... + world
    for window in ("counted", "again"):
        assert alike(results, window, "rates_across_ranks") == {
            "root.train": {
                "samples": spread(
                    world, 500.0 * summed, 1000.0 * summed, (0, 1000.0), (world - 1, world * 1000.0)
                ),
                "tokens": spread(1, 320.0, 640.0, (ONLY, 640.0), (ONLY, 640.0)),
            }
        }


def test_a_unit_one_rank_counted_names_that_rank_alone(job: Job) -> None:
    """Only rank 1 counts tokens: one rank, its own total and rate, slowest and fastest."""
    _, results, _ = job
    tokens = alike(results, "counted", "rates_across_ranks")["root.train"]["tokens"]
    assert tokens == spread(1, 320.0, 640.0, (1, 640.0), (1, 640.0))


def test_a_rank_that_did_not_count_counts_nowhere(job: Job) -> None:
    """Rank 0 counts nothing: min, mean and the slowest rank come from ranks 1.. alone, not a 0."""
    world, results, _ = job
    summed = world * (world + 1) // 2 - 1  # 2 + ... + world
    assert alike(results, "some", "rates_across_ranks") == {
        "root.train": {
            "samples": spread(
                world - 1, 500.0 * summed, 1000.0 * summed, (1, 2000.0), (world - 1, world * 1000.0)
            )
        }
    }


def test_a_tie_names_the_lowest_rank_and_nothing_counted_is_empty(job: Job) -> None:
    """Every rank at 1000 a second: rank 0 is slowest and fastest; no count: an empty mapping."""
    world, results, _ = job
    assert alike(results, "tie", "rates_across_ranks") == {
        "root.train": {
            "samples": spread(world, 500.0 * world, 1000.0 * world, (0, 1000.0), (0, 1000.0))
        }
    }
    assert alike(results, "none", "rates_across_ranks") == {}
    assert alike(results, "none", "metrics") == {}


def test_as_metrics_names_the_job_rate_and_the_ranks(job: Job) -> None:
    """`as_metrics()` has `.{unit}.job`, `.job_ranks`, `.{unit}_per_s.job` and the rank figures."""
    world, results, _ = job
    summed = world * (world + 1) // 2
    head = "timing.root.train"
    assert alike(results, "counted", "metrics") == {
        f"{head}.samples.job": 500.0 * summed,
        f"{head}.samples.job_ranks": float(world),
        f"{head}.samples_per_s.job": 1000.0 * summed,
        f"{head}.samples_per_s.min_rank": 1000.0,
        f"{head}.samples_per_s.max_rank": world * 1000.0,
        f"{head}.samples_per_s.mean_rank": 1000.0 * summed / world,
        f"{head}.samples_per_s.slowest_rank": 0.0,
        f"{head}.samples_per_s.fastest_rank": world - 1.0,
        f"{head}.tokens.job": 320.0,
        f"{head}.tokens.job_ranks": 1.0,
        f"{head}.tokens_per_s.job": 640.0,
        f"{head}.tokens_per_s.min_rank": 640.0,
        f"{head}.tokens_per_s.max_rank": 640.0,
        f"{head}.tokens_per_s.mean_rank": 640.0,
        f"{head}.tokens_per_s.slowest_rank": float(ONLY),
        f"{head}.tokens_per_s.fastest_rank": float(ONLY),
    }


def test_the_units_ride_the_same_reduce_at_constant_bytes(job: Job) -> None:
    """Agreed units add 56 bytes each to the same 4 collectives, at any world size."""
    _, results, _ = job
    for window in ("again", "some", "tie", "none"):
        assert alike(results, window, "traffic") == STEADY


def job_series(world: int, samples: float, low: tuple[int, float], high: float) -> list[list[Any]]:
    """Return the scraped job series of `root.train` samples and of rank 1's tokens."""
    series = []
    for unit, rate, slowest, lowest, highest in (
        ("samples", samples, low[0], low[1], high),
        ("tokens", 640.0, ONLY, 640.0, 640.0),
    ):
        labels = {
            "looptrace_path": "root.train",
            "looptrace_unit": unit,
            "looptrace_world_size": str(world),
            "span_name": "train",
        }
        series += [
            ["looptrace_job_items_slowest_rank", labels, float(slowest)],
            [
                "looptrace_job_items_window_rank_rate",
                {"looptrace_extreme": "max", **labels},
                highest,
            ],
            [
                "looptrace_job_items_window_rank_rate",
                {"looptrace_extreme": "min", **labels},
                lowest,
            ],
            ["looptrace_job_items_window_rate", labels, rate],
        ]
    return sorted(series, key=json.dumps)


def test_prometheus_serves_the_job_rate_on_the_job_rank_only(job: Job) -> None:
    """Rank 0 serves the job's rate, the min/max rank rate and the slowest rank; others none."""
    world, results, _ = job
    summed = world * (world + 1) // 2
    assert results[0]["counted"]["scraped"] == job_series(
        world, 1000.0 * summed, (0, 1000.0), world * 1000.0
    )
    # the latest cross-rank window that counted each unit: samples the tie, tokens "again"
    assert results[0]["none"]["scraped"] == job_series(world, 1000.0 * world, (0, 1000.0), 1000.0)
    assert all(window["scraped"] == [] for r in results[1:] for window in r.values())


def test_otlp_metrics_carry_the_job_rate(job: Job) -> None:
    """A metric reader of rank 0 gets the same gauges, named `looptrace.job.items...`."""
    world, results, _ = job
    summed = world * (world + 1) // 2
    points = {
        (name, attributes["looptrace.unit"], attributes.get("looptrace.extreme")): (unit, value)
        for name, unit, attributes, value in results[0]["counted"]["pushed"]
    }
    assert points == {
        ("looptrace.job.items.window.rate", "samples", None): ("{item}/s", 1000.0 * summed),
        ("looptrace.job.items.window.rank_rate", "samples", "min"): ("{item}/s", 1000.0),
        ("looptrace.job.items.window.rank_rate", "samples", "max"): ("{item}/s", world * 1000.0),
        ("looptrace.job.items.slowest_rank", "samples", None): ("{rank}", 0.0),
        ("looptrace.job.items.window.rate", "tokens", None): ("{item}/s", 640.0),
        ("looptrace.job.items.window.rank_rate", "tokens", "min"): ("{item}/s", 640.0),
        ("looptrace.job.items.window.rank_rate", "tokens", "max"): ("{item}/s", 640.0),
        ("looptrace.job.items.slowest_rank", "tokens", None): ("{rank}", float(ONLY)),
    }
    for _, _, attributes, _ in results[0]["counted"]["pushed"]:
        assert "looptrace.rank" not in attributes
    assert all(window["pushed"] == [] for r in results[1:] for window in r.values())


def test_the_snapshot_file_and_summary_show_the_job_rate(
    job: Job, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each rank's file holds `rates_across_ranks`; `summary` of rank 0's names job and slowest."""
    world, results, workdir = job
    files = [workdir / f"snapshots.rank{rank}.jsonl" for rank in range(world)]
    for path in files:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [line.get("rates_across_ranks") for line in lines] == [
            results[0][window]["rates_across_ranks"] or None
            for window in ("counted", "again", "some", "tie", "none")
        ]
    assert main(["summary", str(files[0])]) == 0
    out = capsys.readouterr().out
    # samples: the job's rate in its 4 windows, 1 + .. + world, twice, less rank 0's once, and
    # `world` in the tie; rank 0 slowest in 3 of them at 1,000/s, the last rank fastest
    summed = world * (world + 1) // 2
    job_rate = (2 * summed + summed - 1 + world) * 1000 / 4
    assert (
        f"throughput root.train samples across ranks: job {job_rate:,.0f} samples/s "
        f"({world} ranks); slowest rank 0 at 1,000/s, fastest rank {world - 1} at "
        f"{world * 1000:,}/s (slowest in 3 of 4 windows)"
    ) in out.splitlines()
    assert (
        f"throughput root.train tokens across ranks: job 640 tokens/s (1 rank); slowest rank "
        f"{ONLY} at 640/s, fastest rank {ONLY} at 640/s (slowest in 2 of 2 windows)"
    ) in out.splitlines()
