"""Cross-rank statistics through real torch.distributed (gloo on the CPU), 1, 2, 4 and 8 ranks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from looptrace._stats.spread import SPREAD_STATS

# The test extra's torch; CI's other Python versions run without it (.ci/other-pythons).
pytest.importorskip("torch.distributed", reason="needs torch (the test extra)")
from tests.helpers import rank_worker
from tests.helpers.processes import run_ranks

WORKER = Path(rank_worker.__file__)
JOB_TIMEOUT_S = 120
SUFFIXES = ("min_rank", "max_rank", "mean_rank", "slowest_rank", "fastest_rank")


# --- reference: the spread of every path, computed in plain Python from each rank's stats ---


def reference(per_rank: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Return the expected `to_dict()["across_ranks"]` of the ranks' local `to_dict()`s."""
    union = sorted(set().union(*per_rank))
    expected: dict[str, dict[str, Any]] = {}
    for path in union:
        ranks = [r for r, stats in enumerate(per_rank) if path in stats]
        entry: dict[str, Any] = {
            "ranks": len(ranks),
            "absent": [r for r in range(len(per_rank)) if r not in ranks],
        }
        for stat in SPREAD_STATS:
            # NaN (a path only cut, with no interval ended in the window) counts nowhere.
            values = {
                r: float(per_rank[r][path][stat])
                for r in ranks
                if not math.isnan(float(per_rank[r][path][stat]))
            }
            if not values:
                nan = math.nan
                entry[stat] = {
                    "min": nan, "max": nan, "mean": nan, "slowest_rank": None,
                    "fastest_rank": None,
                }  # fmt: skip
                continue
            top, low = max(values.values()), min(values.values())
            entry[stat] = {
                "min": low,
                "max": top,
                "mean": sum(values.values()) / len(values),
                "slowest_rank": min(r for r, v in values.items() if v == top),
                "fastest_rank": min(r for r, v in values.items() if v == low),
            }
        expected[path] = entry
    return expected


def numbers(across: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Flatten the statistics of `{path: {stat: {k: v}}}` to `{"path stat.k": v}` for approx."""
    return {
        f"{path} {stat}.{k}": v
        for path, entry in across.items()
        for stat in SPREAD_STATS
        for k, v in entry[stat].items()
        if v is not None
    }


def presence(across: dict[str, dict[str, Any]]) -> dict[str, tuple[int, list[int]]]:
    """Return `{path: (ranks, absent)}`."""
    return {path: (entry["ranks"], entry["absent"]) for path, entry in across.items()}


# --- a real job: WORLD processes of tests/helpers/rank_worker.py, joined through a file store ---


def run_job(
    world: int, workdir: Path, listed: int | None = None, scenario: tuple[str, ...] = ()
) -> list[Any]:
    """Run `world` rank processes to the end and return each one's results, in rank order.

    `scenario` (`("skipped",)` or `("fault", AFTER)`) runs `rank_worker.scenario` instead.
    """
    args = ([] if listed is None else [str(listed)]) + list(scenario)
    return run_ranks(WORKER, world, workdir, args, timeout_s=JOB_TIMEOUT_S)


_JOBS: dict[tuple[int, int | None], list[dict[str, Any]]] = {}


def cached_job(
    world: int, listed: int | None, tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, Any]]:
    """Return the results of a `world`-rank job, run once per test session."""
    if (world, listed) not in _JOBS:
        workdir = tmp_path_factory.mktemp(f"job{world}-{listed}")
        _JOBS[world, listed] = run_job(world, workdir, listed)
    return _JOBS[world, listed]


@pytest.fixture(
    scope="module",
    params=[(2, None), (4, None), (8, None), (4, 1)],
    ids=["2-ranks", "4-ranks", "8-ranks", "4-ranks-bitmap"],
)
def job(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Yield (world, results per rank): 2, 4 and 8 ranks, and 4 ranks listing absences by bitmap."""
    world, listed = request.param
    return world, cached_job(world, listed, tmp_path_factory)


def local_dict(result: dict[str, Any]) -> dict[str, Any]:
    """Return a window's per-path dict of one rank, without the cross-rank key."""
    return {k: v for k, v in result["dict"].items() if k != "across_ranks"}


def test_every_rank_gets_the_reference_spread(job: Any) -> None:
    """Each window's cross-rank dict equals a plain-Python reduction of all local stats."""
    world, results = job
    for window in [*rank_worker.WINDOWS, "after_shutdown"]:
        per_rank = [local_dict(r[window]) for r in results]
        expected = reference(per_rank)
        for rank in range(world):
            assert results[rank][window]["reduced"], (window, rank)
            got = results[rank][window]["dict"]["across_ranks"]
            assert presence(got) == presence(expected), (window, rank)
            assert numbers(got) == pytest.approx(numbers(expected), rel=1e-12, nan_ok=True), (
                window,
                rank,
            )


def test_mismatched_paths_union_absent_and_slowest_rank(job: Any) -> None:
    """A slow rank, a rank without backward and one with an extra checkpoint: union, absent."""
    world, results = job
    slow, last = rank_worker.slow_rank(world), world - 1
    across = results[0]["mismatched"]["dict"]["across_ranks"]
    assert sorted(across) == [
        "root.training",
        "root.training.backward",
        "root.training.checkpoint",
        "root.training.data",
        "root.training.forward",
    ]
    assert {path: (e["ranks"], e["absent"]) for path, e in across.items()} == {
        "root.training": (world, []),
        "root.training.backward": (world - 1, [1]),
        "root.training.checkpoint": (1, list(range(world - 1))),
        "root.training.data": (world, []),
        "root.training.forward": (world, []),
    }
    assert across["root.training.forward"]["mean"] == pytest.approx(
        {
            "min": 0.100,
            "max": 0.250,
            "mean": (0.100 * (world - 1) + 0.250) / world,
            "slowest_rank": slow,
            "fastest_rank": 0,
        }
    )
    # the absent ranks are not zeros: the one rank that checkpoints is min, max and mean
    assert across["root.training.checkpoint"]["total"] == pytest.approx(
        {"min": 1.5, "max": 1.5, "mean": 1.5, "slowest_rank": last, "fastest_rank": last}
    )
    assert across["root.training"]["mean"]["slowest_rank"] == last
    for rank in range(world):
        own = {"root.training", "root.training.data", "root.training.forward"}
        own |= {"root.training.backward"} if rank != 1 else set()
        own |= {"root.training.checkpoint"} if rank == last else set()
        assert set(local_dict(results[rank]["mismatched"])) == own, rank


def test_metric_names_of_the_slowest_rank(job: Any) -> None:
    """as_metrics() names the slowest rank and the spread under {path}.{stat}.*_rank."""
    world, results = job
    metrics = results[world - 1]["mismatched"]["metrics"]
    forward = {k: v for k, v in metrics.items() if k.startswith("timing.root.training.forward.")}
    expected_names = {
        f"timing.root.training.forward.{s}"
        for s in ("count", "total", "mean", "min", "max", "std", "p50", "p90", "p99")
    }
    expected_names |= {
        "timing.root.training.forward.self_time",
        "timing.root.training.forward.ranks",
    }
    expected_names |= {
        f"timing.root.training.forward.{stat}.{suffix}"
        for stat in SPREAD_STATS
        for suffix in SUFFIXES
    }
    assert set(forward) == expected_names
    assert forward["timing.root.training.forward.mean.slowest_rank"] == rank_worker.slow_rank(world)
    assert forward["timing.root.training.forward.mean.max_rank"] == pytest.approx(0.25)
    assert forward["timing.root.training.forward.mean.min_rank"] == pytest.approx(0.1)
    assert forward["timing.root.training.forward.ranks"] == world
    assert metrics["timing.root.training.backward.ranks"] == world - 1


def test_metrics_add_cross_rank_names_and_keep_the_local_ones(job: Any) -> None:
    """The local {path}.{stat} metrics are unchanged; every extra name is a cross-rank one."""
    _, results = job
    for result in results:
        for window in ("mismatched", "rank_zero_idle", "all_equal"):
            metrics, local = result[window]["metrics"], result[window]["local_metrics"]
            assert {k: metrics[k] for k in local} == local
            extra = set(metrics) - set(local)
            assert extra
            assert all(k.endswith((".ranks", *(f".{s}" for s in SUFFIXES))) for k in extra)


def test_a_rank_that_timed_nothing_is_absent_everywhere(job: Any) -> None:
    """Rank 0 with an empty window joins the reduction; its paths come from the other ranks."""
    world, results = job
    idle = results[0]["rank_zero_idle"]
    assert local_dict(idle) == {}
    batch = idle["dict"]["across_ranks"]["root.eval.batch"]
    assert (batch["ranks"], batch["absent"]) == (world - 1, [0])
    assert batch["count"] == pytest.approx(
        {
            "min": 1,
            "max": world - 1,
            "mean": world / 2,
            "slowest_rank": world - 1,
            "fastest_rank": 1,
        }
    )
    assert batch["mean"]["slowest_rank"] == world - 1
    assert idle["metrics"]["timing.root.eval.batch.mean.max_rank"] == pytest.approx(0.01 * world)


def test_all_ranks_idle_and_after_shutdown_give_empty_spreads(job: Any) -> None:
    """With no path on any rank, and after shutdown, every rank gets {} and no hang."""
    _, results = job
    for result in results:
        for window in ("all_idle", "after_shutdown"):
            assert result[window]["dict"] == {"across_ranks": {}}
            assert result[window]["metrics"] == {}
        assert result["health"] == {"internal_errors": 0}


def test_a_tie_names_the_lowest_rank(job: Any) -> None:
    """When every rank has the same value the slowest and the fastest rank are rank 0."""
    _, results = job
    barrier = results[-1]["all_equal"]["dict"]["across_ranks"]["root.sync.barrier"]
    assert barrier["total"] == pytest.approx(
        {"min": 0.02, "max": 0.02, "mean": 0.02, "slowest_rank": 0, "fastest_rank": 0}
    )
    assert {barrier[stat]["slowest_rank"] for stat in SPREAD_STATS} == {0}
    assert {barrier[stat]["fastest_rank"] for stat in SPREAD_STATS} == {0}


def test_bytes_per_rank_do_not_grow_with_the_world_size(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Every reset moves the same collective calls and bytes per rank with 2, 4 and 8 ranks."""
    moved = {
        world: [
            {w: r[w]["traffic"] for w in r if w != "health"}
            for r in cached_job(world, None, tmp_path_factory)
        ]
        for world in (2, 4, 8)
    }
    first = moved[8][0]
    assert moved[4] == [first] * 4 and moved[8] == [first] * 8
    # with 2 ranks the checkpointing rank is rank 1, which skips backward: fewer new paths on
    # any rank when a table is built (the first window, and again after it was lost), so a
    # smaller slot vector there, nothing else
    smaller = {"calls": 9, "bytes": first["table_lost"]["bytes"] - 16 * 8}
    assert (
        moved[2]
        == [{**first, "mismatched": {"calls": 8, "bytes": 4770 - 16 * 8}, "table_lost": smaller}]
        * 2
    )
    assert first["mismatched"] == {"calls": 8, "bytes": 4770}
    # a rank without the table: every rank sees the fingerprints differ and drops its table;
    # then a header, 32 slots, the window's 5 paths (26 bytes wide), a header, the three
    # statistics all_reduces over 5 paths and one MIN round for the 2 paths not every rank ran
    # (backward, checkpoint). Per path: the extremes (highest, lowest), the sums and the
    # counts, the slowest and fastest ranks and the straggler's total, and the job's histogram
    # (highest p50 and p90, lowest min, 47 bucket counts); per rank, not per path: 3 + 2 + 3
    # values naming the straggler, 2 + 64 choosing the detail ranks, and per memory figure
    # (4) its highest and lowest value, its sum and count and the ranks holding both extremes.
    header = 4 * 8
    per_path = 8 * (2 * 6 + 2 * 6 + 1 + 2 * 6 + 1) + 8 * (3 + 47)
    straggler = 8 * (3 + 2 + 3) + 8 * (2 + 64) + 8 * 4 * (2 + 2 + 2)
    assert first["table_lost"] == {
        "calls": 9,
        "bytes": 3 * header + 32 * 8 + 5 * 26 + 5 * per_path + straggler + 2 * 8,
    }
    # the same paths again: the header and three all_reduces over the 9 agreed paths, and one
    # MIN round naming the single absent (or present) rank of backward and checkpoint
    assert first["steady"] == {"calls": 5, "bytes": header + 9 * per_path + straggler + 2 * 8}


# --- realignment: a rank that skips a reduce or fails in one; the next reduces still work ---


def assert_reduced_alike(windows: list[list[dict[str, Any]]], index: int) -> None:
    """Window `index` is reduced on every rank, to the plain-Python spread of that window."""
    per_rank = [local_dict(rank_windows[index]) for rank_windows in windows]
    expected = reference(per_rank)
    for rank, rank_windows in enumerate(windows):
        got = rank_windows[index]
        assert got["reduced"], (index, rank)
        across = got["dict"]["across_ranks"]
        assert presence(across) == presence(expected), (index, rank)
        assert numbers(across) == pytest.approx(numbers(expected), rel=1e-12), (index, rank)


@pytest.mark.parametrize("world", [2, 3])
def test_a_skipped_reduce_is_warned_once_then_realigned(world: int, tmp_path: Path) -> None:
    """Rank 1 resets without across_ranks: a warning on each rank, then all reduce one window."""
    windows = run_job(world, tmp_path, scenario=("skipped",))
    odd = rank_worker.ODD_WINDOW
    for index in (0, 1, odd + 2, odd + 3):
        assert_reduced_alike(windows, index)
    assert [[w["reduced"] for w in rank_windows[odd : odd + 2]] for rank_windows in windows] == [
        [False, False]
    ] * world
    # rank 1 closed window 3 alone: its 4th window met the others' 3rd; every rank skipped it
    # and says so once, and the ranks behind skipped their next reduce
    for rank, rank_windows in enumerate(windows):
        said = [(index, w["warnings"]) for index, w in enumerate(rank_windows) if w["warnings"]]
        mine = 4 if rank == 1 else 3
        assert said == [
            (
                odd + (rank == 1),
                [
                    f"looptrace: reset(across_ranks=True) closes window {mine} of this rank "
                    "while the ranks' windows run from 3 to 4 (a rank reset without "
                    "across_ranks=True or could not take part in a reduce): no rank reduces "
                    "this window, and the ranks behind skip as many reduces as they are "
                    "behind, so that the next ones reduce the same window on every rank"
                ],
            )
        ], rank
        assert rank_windows[-1]["internal_errors"] == 0


@pytest.mark.parametrize(
    ("world", "after"),
    [(3, 0), (3, 2), (2, 5), (3, 6)],
    ids=["before-header", "at-names", "at-sums", "at-slowest"],
)
def test_a_failure_between_collectives_leaves_every_rank_able_to_reduce(
    world: int, after: int, tmp_path: Path
) -> None:
    """Rank 1 raises before its collective AFTER: no rank reduces that window, later ones work."""
    windows = run_job(world, tmp_path, scenario=("fault", str(after)))
    odd = rank_worker.ODD_WINDOW
    for index in range(rank_worker.SCENARIO_WINDOWS):
        if index != odd:
            assert_reduced_alike(windows, index)
    for rank, rank_windows in enumerate(windows):
        failed = rank_windows[odd]
        assert not failed["reduced"], rank
        assert failed["internal_errors"] == (rank == 1), rank
        assert rank_windows[-1]["internal_errors"] == (rank == 1), rank
        assert failed["warnings"] == (
            ["looptrace: internal error in reset(across_ranks=True) (further ones are counted)"]
            if rank == 1
            else [
                "looptrace: a rank failed during reset(across_ranks=True): no rank reduces "
                "this window"
            ]
        ), rank
