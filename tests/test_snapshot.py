"""Snapshot: a read-only mapping with to_dict() and flat as_metrics()."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from looptrace import SectionStats, Snapshot
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
        "p90": pytest.approx(0.5, rel=0.01),
        "p99": pytest.approx(0.5, rel=0.01),
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
