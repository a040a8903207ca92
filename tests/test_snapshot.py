"""Snapshot: a read-only mapping with to_dict() and flat as_metrics()."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import pytest

from looptrace import RankSpread, SectionSpread, SectionStats, Snapshot
from looptrace.testing import Capture


def _one_section(cap: Capture) -> Snapshot:
    train = cap.lt.timer("training")
    train.record("forward")
    cap.clock.advance(0.5)
    train.record("forward")
    cap.clock.advance(1.5)
    train.stop()
    return cap.lt.reset()


def test_mapping_interface(cap: Capture) -> None:
    """Iteration, len, in, items() and indexing behave like a read-only mapping."""
    snap = _one_section(cap)
    assert isinstance(snap, Mapping)
    assert list(snap) == ["root.training", "root.training.forward"]
    assert len(snap) == 2
    assert "root.training.forward" in snap
    assert isinstance(snap["root.training"], SectionStats)
    with pytest.raises(TypeError):
        snap["x"] = snap["root.training"]  # type: ignore[index]


def test_to_dict_is_plain_data(cap: Capture) -> None:
    """to_dict() gives every statistic of every path as plain values."""
    forward = _one_section(cap).to_dict()["root.training.forward"]
    buckets = forward.pop("buckets")
    assert isinstance(buckets, list) and sum(buckets) == 2
    assert forward == {
        "count": 2,
        "total": 2.0,
        "mean": 1.0,
        "min": 0.5,
        "max": 1.5,
        "std": 0.5,
        "p50": pytest.approx(0.5, rel=0.01),
        "p90": pytest.approx(1.5, rel=0.01),
        "p99": pytest.approx(1.5, rel=0.01),
        "self_time": 2.0,
        "errors": 0,
    }


def test_as_metrics_flat_names(cap: Capture) -> None:
    """as_metrics(prefix) flattens to {prefix}.{path}.{stat} for every statistic."""
    flat = _one_section(cap).as_metrics(prefix="timing")
    stats = ["count", "total", "mean", "min", "max", "std", "p50", "p90", "p99", "self_time"]
    assert sorted(flat) == sorted(
        f"timing.{path}.{stat}"
        for path in ("root.training", "root.training.forward")
        for stat in stats
    )
    assert flat["timing.root.training.forward.mean"] == 1.0
    assert flat["timing.root.training.count"] == 1.0


def test_as_metrics_without_prefix(cap: Capture) -> None:
    """An empty prefix gives bare {path}.{stat} names."""
    assert "root.training.mean" in _one_section(cap).as_metrics(prefix="")


def _spread(low: float, high: float, mean: float, slowest: int | None) -> RankSpread:
    return RankSpread(min=low, max=high, mean=mean, slowest_rank=slowest)


def _cross_rank_snapshot() -> Snapshot:
    """Return a snapshot whose one path ran on ranks 0 and 2 of 3, with a NaN p99 spread."""
    nan = math.nan
    spread = SectionSpread(
        ranks=2,
        absent=(1,),
        count=_spread(2, 4, 3, 2),
        total=_spread(1.0, 3.0, 2.0, 2),
        mean=_spread(0.5, 0.75, 0.625, 2),
        p99=_spread(nan, nan, nan, None),
        max=_spread(0.5, 1.0, 0.75, 2),
        self_time=_spread(1.0, 1.0, 1.0, 0),
    )
    return Snapshot({}, start_ns=0, end_ns=1, rank=1, across_ranks={"root.eval": spread})


def test_as_metrics_with_cross_rank_data() -> None:
    """Cross-rank spreads flatten to {path}.ranks and {path}.{stat}.*_rank, NaN left out."""
    assert _cross_rank_snapshot().as_metrics(prefix="t") == {
        "t.root.eval.ranks": 2.0,
        "t.root.eval.count.min_rank": 2,
        "t.root.eval.count.max_rank": 4,
        "t.root.eval.count.mean_rank": 3,
        "t.root.eval.count.slowest_rank": 2.0,
        "t.root.eval.total.min_rank": 1.0,
        "t.root.eval.total.max_rank": 3.0,
        "t.root.eval.total.mean_rank": 2.0,
        "t.root.eval.total.slowest_rank": 2.0,
        "t.root.eval.mean.min_rank": 0.5,
        "t.root.eval.mean.max_rank": 0.75,
        "t.root.eval.mean.mean_rank": 0.625,
        "t.root.eval.mean.slowest_rank": 2.0,
        "t.root.eval.max.min_rank": 0.5,
        "t.root.eval.max.max_rank": 1.0,
        "t.root.eval.max.mean_rank": 0.75,
        "t.root.eval.max.slowest_rank": 2.0,
        "t.root.eval.self_time.min_rank": 1.0,
        "t.root.eval.self_time.max_rank": 1.0,
        "t.root.eval.self_time.mean_rank": 1.0,
        "t.root.eval.self_time.slowest_rank": 0.0,
    }


def test_to_dict_with_cross_rank_data() -> None:
    """to_dict() keeps the per-path dicts and adds the spreads under "across_ranks"."""
    data = _cross_rank_snapshot().to_dict()
    p99 = data["across_ranks"]["root.eval"].pop("p99")
    assert math.isnan(p99.pop("min")) and math.isnan(p99.pop("max"))
    assert math.isnan(p99.pop("mean")) and p99 == {"slowest_rank": None}
    assert data == {
        "across_ranks": {
            "root.eval": {
                "ranks": 2,
                "absent": [1],
                "count": {"min": 2, "max": 4, "mean": 3, "slowest_rank": 2},
                "total": {"min": 1.0, "max": 3.0, "mean": 2.0, "slowest_rank": 2},
                "mean": {"min": 0.5, "max": 0.75, "mean": 0.625, "slowest_rank": 2},
                "max": {"min": 0.5, "max": 1.0, "mean": 0.75, "slowest_rank": 2},
                "self_time": {"min": 1.0, "max": 1.0, "mean": 1.0, "slowest_rank": 0},
            }
        }
    }


def test_local_snapshot_has_no_cross_rank_data(cap: Capture) -> None:
    """A plain reset() carries across_ranks None and no extra dict key or metric."""
    snap = _one_section(cap)
    assert snap.across_ranks is None
    assert sorted(snap.to_dict()) == ["root.training", "root.training.forward"]


def test_as_metrics_chosen_stats_and_separator(cap: Capture) -> None:
    """stats= picks the statistics, sep= joins prefix, path levels and statistic."""
    flat = _one_section(cap).as_metrics(prefix="timing", stats=("p99", "mean"), sep="/")
    assert flat == {
        "timing/root/training/mean": 2.0,
        "timing/root/training/p99": pytest.approx(2.0, rel=0.01),
        "timing/root/training/forward/mean": 1.0,
        "timing/root/training/forward/p99": pytest.approx(1.5, rel=0.01),
    }


def test_as_metrics_chosen_stats_with_cross_rank_data() -> None:
    """Cross-rank keys follow stats= and sep= too; `ranks` always stays."""
    assert _cross_rank_snapshot().as_metrics(prefix="t", stats=["mean", "p99"], sep="/") == {
        "t/root/eval/ranks": 2.0,
        "t/root/eval/mean/min_rank": 0.5,
        "t/root/eval/mean/max_rank": 0.75,
        "t/root/eval/mean/mean_rank": 0.625,
        "t/root/eval/mean/slowest_rank": 2.0,
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stats": ("mean", "p95")}, "unknown statistic(s) 'p95'; choose from count, total"),
        ({"stats": "median"}, "unknown statistic(s) 'median'"),
        ({"sep": ""}, "as_metrics(sep=...) must not be empty"),
    ],
)
def test_as_metrics_rejects_unknown_stats_and_empty_separator(
    cap: Capture, kwargs: dict[str, Any], message: str
) -> None:
    """An unknown statistic or an empty separator is a ValueError naming it."""
    snap = _one_section(cap)
    with pytest.raises(ValueError, match=re.escape(message)):
        snap.as_metrics(**kwargs)


def test_step_is_the_lap_index_of_the_outermost_timer_at_the_cut(cap: Capture) -> None:
    """Snapshot.step counts the outermost laps before the cut; None before any lap."""
    assert cap.lt.reset().step is None
    train = cap.lt.timer("training")
    steps = []
    for step in range(7):
        train.record()
        cap.clock.advance(0.1)
        if step % 3 == 2:
            steps.append((step, cap.lt.reset().step))
    train.stop()
    steps.append((7, cap.lt.reset().step))
    assert steps == [(2, 2), (5, 5), (7, 7)]
