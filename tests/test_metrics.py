"""The duration histogram handed to a MeterProvider at reset() equals the snapshot."""

from __future__ import annotations

import random
from typing import Any

from opentelemetry.sdk.metrics.export import HistogramDataPoint

from looptrace._buckets import BOUNDARIES_S
from looptrace.testing import Capture


def _points(cap: Capture) -> dict[str, HistogramDataPoint]:
    data = cap.metrics.get_metrics_data()
    assert data is not None
    (scope,) = data.resource_metrics[0].scope_metrics
    (metric,) = scope.metrics
    assert (metric.name, metric.unit) == ("looptrace.section.duration", "s")
    points: dict[str, HistogramDataPoint] = {}
    for point in metric.data.data_points:
        assert isinstance(point, HistogramDataPoint)
        points[str(point.attributes["looptrace.path"])] = point  # type: ignore[index]
    return points


def test_histogram_matches_snapshot_buckets_count_and_sum(cap: Capture) -> None:
    """Bucket counts, count and sum of the metric equal the snapshot's, per path."""
    rng = random.Random(7)
    train = cap.lt.timer("training")
    for _ in range(200):
        train.record("data")
        cap.clock.advance(rng.lognormvariate(-6, 1.5))
        train.record("forward")
        cap.clock.advance(rng.lognormvariate(-3, 0.5))
        train.record()
    train.stop()
    snap = cap.lt.reset()
    points = _points(cap)
    assert set(points) == set(snap)
    for path, stats in snap.items():
        point = points[path]
        assert tuple(point.explicit_bounds) == BOUNDARIES_S
        assert tuple(point.bucket_counts) == stats.buckets
        assert point.count == stats.count
        assert abs(point.sum - stats.total) < 1e-9 * stats.count


def test_metric_attributes_are_path_span_name_and_rank(cap: Capture) -> None:
    """Each point carries looptrace.path, span.name and the rank attributes."""
    cap.lt.timer("training").record("forward")
    cap.clock.advance(0.5)
    cap.lt.timer("training").stop()  # a measurement counts in the window where it ends
    cap.lt.reset()
    attributes: dict[str, Any] = dict(_points(cap)["root.training.forward"].attributes or {})
    assert attributes == {
        "looptrace.path": "root.training.forward",
        "span.name": "forward",
        "looptrace.rank": 0,
        "looptrace.world_size": 1,
    }


def test_nothing_reaches_metrics_before_reset(cap: Capture) -> None:
    """No value is recorded per section: the histogram is empty until reset()."""
    train = cap.lt.timer("training")
    for _ in range(10):
        train.record("x")
        cap.clock.advance(0.01)
    data = cap.metrics.get_metrics_data()
    assert data is None or all(
        not scope.metrics for rm in data.resource_metrics for scope in rm.scope_metrics
    )
