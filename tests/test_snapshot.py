"""Snapshot: a read-only mapping with to_dict() and flat as_metrics()."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looptrace import RankInfo, RankSpread, RateSpread, SectionSpread, SectionStats, Snapshot
from looptrace._export.files import SnapshotFileWriter
from looptrace._stats.snapshot import METRIC_STATS
from looptrace._stats.spread import SPREAD_STATS
from looptrace._stats.straggler import Straggler
from looptrace.testing import Capture

from .helpers.examples import examples


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
    fastest = None if slowest is None else 0  # rank 0 holds every lowest value
    return RankSpread(min=low, max=high, mean=mean, slowest_rank=slowest, fastest_rank=fastest)


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
        "t.root.eval.count.fastest_rank": 0.0,
        "t.root.eval.count.slowest_rank": 2.0,
        "t.root.eval.total.min_rank": 1.0,
        "t.root.eval.total.max_rank": 3.0,
        "t.root.eval.total.mean_rank": 2.0,
        "t.root.eval.total.fastest_rank": 0.0,
        "t.root.eval.total.slowest_rank": 2.0,
        "t.root.eval.mean.min_rank": 0.5,
        "t.root.eval.mean.max_rank": 0.75,
        "t.root.eval.mean.mean_rank": 0.625,
        "t.root.eval.mean.fastest_rank": 0.0,
        "t.root.eval.mean.slowest_rank": 2.0,
        "t.root.eval.max.min_rank": 0.5,
        "t.root.eval.max.max_rank": 1.0,
        "t.root.eval.max.mean_rank": 0.75,
        "t.root.eval.max.fastest_rank": 0.0,
        "t.root.eval.max.slowest_rank": 2.0,
        "t.root.eval.self_time.min_rank": 1.0,
        "t.root.eval.self_time.max_rank": 1.0,
        "t.root.eval.self_time.mean_rank": 1.0,
        "t.root.eval.self_time.fastest_rank": 0.0,
        "t.root.eval.self_time.slowest_rank": 0.0,
    }


def test_to_dict_with_cross_rank_data() -> None:
    """to_dict() keeps the per-path dicts and adds the spreads under "across_ranks"."""
    data = _cross_rank_snapshot().to_dict()
    p99 = data["across_ranks"]["root.eval"].pop("p99")
    assert math.isnan(p99.pop("min")) and math.isnan(p99.pop("max"))
    assert math.isnan(p99.pop("mean")) and p99 == {"slowest_rank": None, "fastest_rank": None}
    assert data == {
        "across_ranks": {
            "root.eval": {
                "ranks": 2,
                "absent": [1],
                "count": {"min": 2, "max": 4, "mean": 3, "slowest_rank": 2, "fastest_rank": 0},
                "total": {
                    "min": 1.0,
                    "max": 3.0,
                    "mean": 2.0,
                    "slowest_rank": 2,
                    "fastest_rank": 0,
                },
                "mean": {
                    "min": 0.5,
                    "max": 0.75,
                    "mean": 0.625,
                    "slowest_rank": 2,
                    "fastest_rank": 0,
                },
                "max": {"min": 0.5, "max": 1.0, "mean": 0.75, "slowest_rank": 2, "fastest_rank": 0},
                "self_time": {
                    "min": 1.0,
                    "max": 1.0,
                    "mean": 1.0,
                    "slowest_rank": 0,
                    "fastest_rank": 0,
                },
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
        "t/root/eval/mean/fastest_rank": 0.0,
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stats": ("mean", "p95")}, "unknown statistic(s) 'p95'; choose from count, total"),
        ({"stats": "median"}, "unknown statistic(s) 'median'"),
        ({"sep": ""}, "as_metrics(sep=...) must not be empty"),
        ({"sep": "%"}, "as_metrics(sep='%'): a separator must not hold '%', ASCII letters"),
        ({"sep": "_x_"}, "as_metrics(sep='_x_'): a separator must not hold '%', ASCII letters"),
        ({"sep": "/1"}, "as_metrics(sep='/1'): a separator must not hold '%', ASCII letters"),
    ],
)
def test_as_metrics_rejects_unknown_stats_and_empty_separator(
    cap: Capture, kwargs: dict[str, Any], message: str
) -> None:
    """An unknown statistic, an empty separator or one holding escape characters: ValueError."""
    snap = _one_section(cap)
    with pytest.raises(ValueError, match=re.escape(message)):
        snap.as_metrics(**kwargs)


_LAP = SectionStats(
    count=1, total=0.5, mean=0.5, min=0.5, max=0.5, std=0.0, p50=0.5, p90=0.5, p99=0.5,
    self_time=0.5, errors=0, buckets=(1,),
)  # fmt: skip
_SPREAD = SectionSpread(2, (), *(_spread(1.0, 2.0, 1.5, 1) for _ in range(6)))


def _laps(paths: list[str], *, across_ranks: bool = False) -> Snapshot:
    """Return a snapshot in which every path ran one lap (on two ranks, `across_ranks`)."""
    spreads = dict.fromkeys(paths, _SPREAD) if across_ranks else None
    lap = dict.fromkeys(paths, _LAP)
    return Snapshot(lap, start_ns=0, end_ns=1, rank=0, across_ranks=spreads)


def test_separator_inside_a_name_is_escaped() -> None:
    """sep="/": root.t.a/b and root.t.a.b keep distinct keys; '%' and '/' are %-encoded."""
    snap = _laps(["root.t.a.b", "root.t.a/b", "root.t.50%"], across_ranks=True)
    flat = snap.as_metrics(prefix="timing", stats=("total",), sep="/")
    assert flat == {
        "timing/root/t/a/b/total": 0.5,
        "timing/root/t/a%2Fb/total": 0.5,
        "timing/root/t/50%25/total": 0.5,
        **{
            f"timing/{name}/{key}": value
            for name in ("root/t/a/b", "root/t/a%2Fb", "root/t/50%25")
            for key, value in (
                ("ranks", 2.0),
                ("total/min_rank", 1.0),
                ("total/max_rank", 2.0),
                ("total/mean_rank", 1.5),
                ("total/slowest_rank", 1.0),
                ("total/fastest_rank", 0.0),
            )
        },
    }
    # the default separator writes paths as they are
    assert "timing.root.t.a/b.total" in snap.as_metrics()
    assert "timing.root.t.50%.total" in snap.as_metrics()


# Separators a logger might use, and odd ones: any text without '%', ASCII letters or digits.
separators = st.one_of(
    st.sampled_from([".", "/", "_", "__", "-", ":", "::", " ", "./", "→"]),
    st.text(
        st.characters(exclude_characters="%", exclude_categories=("Cs",)).filter(
            lambda c: not (c.isascii() and c.isalnum())
        ),
        min_size=1,
        max_size=3,
    ),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), separators, st.sampled_from(["", "t"]))
def test_distinct_paths_give_distinct_keys(data: st.DataObject, sep: str, prefix: str) -> None:
    """For any section names and separator, every (path, statistic) has a key of its own."""
    alphabet = sorted({*sep, *"a.%2F"})  # names made of the separator, dots and escapes
    paths = data.draw(
        st.lists(st.text(st.sampled_from(alphabet), max_size=5), unique=True, max_size=8)
    )
    flat = _laps(paths, across_ranks=True).as_metrics(prefix=prefix, sep=sep)
    per_path = len(METRIC_STATS) + 1 + 5 * len(SPREAD_STATS)  # stats, ranks, spreads
    assert len(flat) == len(paths) * per_path


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


def _memory_snapshot(cap: Capture) -> Snapshot:
    """Return a window reduced with the device peak of 2 ranks: 3 GiB on rank 1, 2 on rank 0."""
    timer = cap.lt.timer("train")
    timer.record("forward")
    cap.clock.advance(0.1)
    timer.stop()
    snapshot: Snapshot = cap.lt.reset()
    spread = RankSpread(2 << 30, 3 << 30, 2.5 * (1 << 30), 1, 0)
    return snapshot.with_spreads({}, memory={"device_peak_allocated": spread})


def test_as_metrics_with_memory_across_ranks(cap: Capture) -> None:
    """memory=True adds each figure's spread as memory.{figure}_bytes.*_rank; else nothing."""
    flat = _memory_snapshot(cap).as_metrics(prefix="t", sep="/", memory=True)
    assert {k: v for k, v in flat.items() if "device_peak_allocated" in k} == {
        "t/memory/device_peak_allocated_bytes/min_rank": float(2 << 30),
        "t/memory/device_peak_allocated_bytes/max_rank": float(3 << 30),
        "t/memory/device_peak_allocated_bytes/mean_rank": 2.5 * (1 << 30),
        "t/memory/device_peak_allocated_bytes/slowest_rank": 1.0,
        "t/memory/device_peak_allocated_bytes/fastest_rank": 0.0,
    }
    assert not any("memory" in k for k in _memory_snapshot(cap).as_metrics())


def test_as_metrics_with_rates_across_ranks(cap: Capture) -> None:
    """A unit's spread adds {unit}/job, /job_ranks and {unit}_per_s/job, /*_rank, with `sep`."""
    spread = RateSpread(3, 600.0, 1200.0, 100.0, 700.0, 400.0, slowest_rank=2, fastest_rank=0)
    snapshot = _memory_snapshot(cap).with_spreads({}, rates={"root.train": {"tok/s": spread}})
    flat = snapshot.as_metrics(prefix="t", sep="/")
    assert {k: v for k, v in flat.items() if "tok" in k} == {
        "t/root/train/tok%2Fs/job": 600.0,
        "t/root/train/tok%2Fs/job_ranks": 3.0,
        "t/root/train/tok%2Fs_per_s/job": 1200.0,
        "t/root/train/tok%2Fs_per_s/min_rank": 100.0,
        "t/root/train/tok%2Fs_per_s/max_rank": 700.0,
        "t/root/train/tok%2Fs_per_s/mean_rank": 400.0,
        "t/root/train/tok%2Fs_per_s/slowest_rank": 2.0,
        "t/root/train/tok%2Fs_per_s/fastest_rank": 0.0,
    }
    assert snapshot.to_dict()["rates_across_ranks"] == {"root.train": {"tok/s": spread.to_dict()}}
    assert _memory_snapshot(cap).rates_across_ranks == {}  # cross-rank, nothing counted
    assert cap.lt.reset().rates_across_ranks is None  # this rank's window only


def test_the_snapshot_file_records_memory_across_ranks(cap: Capture, tmp_path: Path) -> None:
    """A cross-rank window's line holds `memory_across_ranks`: figure -> the spread as a dict."""
    path = tmp_path / "snapshots.jsonl"
    writer = SnapshotFileWriter(path, RankInfo(rank=0, world_size=2))
    writer(_memory_snapshot(cap))
    writer.close()
    line = json.loads(path.read_text())
    assert line["memory_across_ranks"] == {
        "device_peak_allocated": {
            "min": 2 << 30,
            "max": 3 << 30,
            "mean": 2.5 * (1 << 30),
            "slowest_rank": 1,
            "fastest_rank": 0,
        }
    }


def test_as_metrics_carries_the_straggler_and_its_cause(cap: Capture) -> None:
    """A named straggler: its rank, excess, share, streak, chronic rank and cause's excess."""
    train = cap.lt.timer("train")
    with train.section("forward"):
        cap.clock.advance(0.1)
    straggler = Straggler(
        rank=3, by="wait", excess_s=0.08, typical_s=0.2, cause="root.train.forward",
        excess_by_path={"root.train.forward": 0.07}, chronic_rank=3, chronic_count=6, streak=2,
    )  # fmt: skip
    reduced = cap.lt.reset().with_spreads({}, straggler)
    flat = reduced.as_metrics(stats=("total",), sep="/")
    assert {k: v for k, v in flat.items() if "straggler" in k} == {
        "timing/straggler/rank": 3.0,
        "timing/straggler/excess_s": 0.08,
        "timing/straggler/share": pytest.approx(0.4),
        "timing/straggler/streak": 2.0,
        "timing/straggler/chronic_rank": 3.0,
        "timing/straggler/chronic_count": 6.0,
        "timing/root/train/forward/straggler_excess_s": 0.07,
    }
    guess = Straggler(rank=1, by="outside_wait", excess_s=0.08, typical_s=0.2, cause=None)
    assert not any("straggler" in k for k in reduced.with_spreads({}, guess).as_metrics())


def test_empty_stats_are_nan_but_the_times_given() -> None:
    """`SectionStats.empty()`: no interval counted, every statistic NaN but the times given."""
    empty = SectionStats.empty(total=1.5, self_time=0.5, errors=2, buckets=(0, 0))
    assert (empty.count, empty.total, empty.self_time, empty.errors) == (0, 1.5, 0.5, 2)
    assert empty.buckets == (0, 0)
    unknown = [empty.mean, empty.min, empty.max, empty.std, empty.p50, empty.p90, empty.p99]
    assert all(math.isnan(value) for value in unknown)
    bare = SectionStats.empty()
    assert math.isnan(bare.total) and math.isnan(bare.self_time) and bare.buckets == ()
