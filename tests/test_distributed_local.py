"""Cross-rank statistics in this process: no process group or torch, one rank, faults, slots."""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The test extra's torch; CI's other Python versions run without it (.ci/other-pythons).
pytest.importorskip("torch.distributed", reason="needs torch (the test extra)")

import torch.distributed as dist

from looptrace._distributed import across_ranks as _distributed
from looptrace._distributed import collectives as _collectives
from looptrace._distributed import path_table as _path_table
from looptrace._stats.snapshot import SectionStats, Snapshot
from looptrace._stats.spread import SPREAD_STATS
from looptrace._stats.tally import Tally
from looptrace.testing import Capture
from tests.helpers import rank_worker

WORKER = Path(rank_worker.__file__)
JOB_TIMEOUT_S = 120
SUFFIXES = ("min_rank", "max_rank", "mean_rank", "slowest_rank", "fastest_rank")


# --- in this process: no process group, torch absent, one rank, a failing collective ---


def _window(cap: Capture) -> None:
    train = cap.lt.timer("training")
    train.record("forward")
    cap.clock.advance(0.5)
    train.stop()


def test_without_a_process_group_it_is_a_noop(
    cap: Capture, caplog: pytest.LogCaptureFixture
) -> None:
    """No initialised group: the local snapshot, across_ranks None, one INFO line, no error."""
    assert not dist.is_initialized()
    _distributed._note_local_once.cache_clear()
    _window(cap)
    with caplog.at_level(logging.INFO, logger="looptrace"):
        snap = cap.lt.reset(across_ranks=True)
        cap.lt.reset(across_ranks=True)
    assert snap.across_ranks is None
    assert "across_ranks" not in snap.to_dict()
    assert snap.as_metrics() == {
        f"timing.{path}.{stat}": value
        for path, stats in snap.items()
        for stat, value in stats.to_dict().items()
        if stat not in ("errors", "buckets")
    }
    assert [r.getMessage() for r in caplog.records] == [
        "looptrace: reset(across_ranks=True) without an initialised torch.distributed "
        "process group returns this rank's statistics only"
    ]
    assert cap.lt.health().internal_errors == 0


def test_without_torch_it_never_imports_torch(
    cap: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program that never imported torch.distributed gets the no-op without a torch import."""
    monkeypatch.delitem(sys.modules, "torch.distributed")
    monkeypatch.delitem(sys.modules, "looptrace._distributed.collectives")
    _window(cap)
    snap = cap.lt.reset(across_ranks=True)
    assert snap.across_ranks is None
    assert list(snap) == ["root.training", "root.training.forward"]
    assert "torch.distributed" not in sys.modules
    assert "looptrace._distributed.collectives" not in sys.modules


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    """Initialise a real 1-rank gloo process group in this process; destroy it after."""
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.usefixtures("one_rank")
def test_one_rank_spread_is_its_own_stats(cap: Capture) -> None:
    """A world of one: min, max and mean are the rank's value; it is the slowest and fastest."""
    _window(cap)
    snap = cap.lt.reset(across_ranks=True)
    assert snap.across_ranks is not None
    assert snap.to_dict()["across_ranks"] == {
        path: {
            "ranks": 1,
            "absent": [],
            **{
                stat: {"min": v, "max": v, "mean": v, "slowest_rank": 0, "fastest_rank": 0}
                for stat in SPREAD_STATS
                for v in [float(getattr(stats, stat))]
            },
        }
        for path, stats in snap.items()
    }


@pytest.mark.usefixtures("one_rank")
def test_a_failing_collective_is_counted_not_raised(
    cap: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception in a collective gives the local snapshot and one internal error."""

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("connection reset by peer")

    monkeypatch.setattr(dist, "all_reduce", broken)
    _window(cap)
    snap = cap.lt.reset(across_ranks=True)
    assert snap.across_ranks is None
    assert snap["root.training.forward"].total == 0.5
    assert cap.lt.health().internal_errors == 1


@pytest.mark.usefixtures("one_rank")
def test_a_statistic_without_a_value_is_nan_and_names_no_rank() -> None:
    """A NaN statistic counts in no spread: NaN min/max/mean, no slowest rank; others intact."""
    stats = SectionStats(
        count=0, total=0.25, mean=math.nan, min=math.nan, max=math.nan, std=math.nan,
        p50=math.nan, p90=math.nan, p99=math.nan, self_time=0.25, errors=0, buckets=(0,),
    )  # fmt: skip
    reduced = _collectives.reduce(Snapshot({"root.a": stats}, start_ns=0, end_ns=1, rank=0))
    assert reduced is not None and reduced.across_ranks is not None
    spread = reduced.across_ranks["root.a"].to_dict()
    missing = {
        "min": math.nan, "max": math.nan, "mean": math.nan, "slowest_rank": None,
        "fastest_rank": None,
    }  # fmt: skip
    ranks = {"slowest_rank": 0, "fastest_rank": 0}
    assert json.dumps(spread, sort_keys=True) == json.dumps(
        {
            "ranks": 1,
            "absent": [],
            "count": {"min": 0.0, "max": 0.0, "mean": 0.0, **ranks},
            "total": {"min": 0.25, "max": 0.25, "mean": 0.25, **ranks},
            "mean": missing,
            "p99": missing,
            "max": missing,
            "self_time": {"min": 0.25, "max": 0.25, "mean": 0.25, **ranks},
        },
        sort_keys=True,
    )


def counted(units: list[str]) -> Snapshot:
    """Return a 1 s window in which `root.train` ran one lap and counted 10 of each of `units`."""
    snapshot = one_lap(["root.train"])
    return Snapshot(
        {"root.train": snapshot["root.train"]},
        start_ns=0,
        end_ns=1_000_000_000,
        rank=0,
        counts=[{("root.train", unit): Tally(10.0) for unit in units}],
    )


@pytest.mark.usefixtures("one_rank")
def test_units_gone_from_every_rank_leave_the_table() -> None:
    """100 units counted, then one, then 100: each gets its spread; units gone are dropped."""
    many = [f"u{i}" for i in range(100)]
    _collectives._TABLE.clear()
    tables = []
    for units in (many, ["u0"], many):
        reduced = _collectives.reduce(counted(units))
        assert reduced is not None and reduced.rates_across_ranks is not None
        assert {u: s.to_dict() for u, s in reduced.rates_across_ranks["root.train"].items()} == {
            unit: {
                "ranks": 1,
                "total": 10.0,
                "per_s": 10.0,
                "min": 10.0,
                "max": 10.0,
                "mean": 10.0,
                "slowest_rank": 0,
                "fastest_rank": 0,
            }
            for unit in units
        }
        tables.append((len(_collectives._TABLE), len(_collectives._TABLE.units)))
    assert tables == [(1, 100), (1, 1), (1, 100)]


def one_lap(paths: list[str]) -> Snapshot:
    """Return a snapshot in which each of `paths` ran one 0.5 s lap."""
    lap = SectionStats(
        count=1, total=0.5, mean=0.5, min=0.5, max=0.5, std=0.0, p50=0.5, p90=0.5, p99=0.5,
        self_time=0.5, errors=0, buckets=(1,),
    )  # fmt: skip
    return Snapshot(dict.fromkeys(paths, lap), start_ns=0, end_ns=1, rank=0)


@pytest.mark.usefixtures("one_rank")
def test_paths_sharing_a_slot_all_arrive_and_gone_paths_leave_the_table() -> None:
    """300 new paths, some on one hash slot, all get spreads; paths gone everywhere are dropped."""
    many = ["root.train", *(f"root.train.s{i}" for i in range(299))]
    slots = {_path_table._digest(json.dumps(p).encode()) % 2048 for p in many}
    assert len(slots) < len(many)  # 300 new paths get 2048 slots: some collide
    _collectives._TABLE.clear()
    windows = [many, ["root.train"], many]
    tables = []
    for paths in windows:
        reduced = _collectives.reduce(one_lap(paths))
        assert reduced is not None and reduced.across_ranks is not None
        assert sorted(reduced.across_ranks) == sorted(paths)
        assert {p: s.ranks for p, s in reduced.across_ranks.items()} == dict.fromkeys(paths, 1)
        tables.append(len(_collectives._TABLE))
    assert tables == [300, 1, 300]
