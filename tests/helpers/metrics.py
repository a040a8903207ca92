"""Reading the histogram points that looptrace hands to a MeterProvider."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    MetricsData,
)
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace.testing import FakeClock

DURATION = "looptrace.section.duration"


METRICS = {
    DURATION,
    "looptrace.section.window.duration",
    "looptrace.spans.dropped",
    "looptrace.rank.steps",
    "looptrace.rank.step.window.duration",
    "looptrace.rank.outside_wait",
    "looptrace.memory.window",
}


def looptrace_metrics(data: MetricsData | None) -> dict[str, Any]:
    """Return looptrace's metrics of a collection by name, checking the scope holds only them."""
    assert data is not None
    (resource_metrics,) = data.resource_metrics
    scopes = [s for s in resource_metrics.scope_metrics if s.scope.name == "looptrace"]
    (scope,) = scopes
    return {metric.name: metric for metric in scope.metrics}


def points_of(data: MetricsData | None) -> dict[str, HistogramDataPoint]:
    """Return looptrace's duration histogram points of `data`, by section path."""
    metrics = looptrace_metrics(data)
    assert set(metrics) == METRICS
    metric = metrics[DURATION]
    assert metric.unit == "s"
    points: dict[str, HistogramDataPoint] = {}
    for point in metric.data.data_points:
        assert isinstance(point, HistogramDataPoint)
        points[str(point.attributes["looptrace.path"])] = point  # type: ignore[index]
    return points


def histogram_of(point: HistogramDataPoint) -> dict[str, Any]:
    """Return a histogram point as plain, comparable data."""
    return {
        "bounds": tuple(point.explicit_bounds),
        "buckets": tuple(point.bucket_counts),
        "count": point.count,
        "sum": round(point.sum, 9),
        "min": round(point.min, 9),
        "max": round(point.max, 9),
    }


def configured(
    reader: InMemoryMetricReader, **kwargs: Any
) -> tuple[looptrace.Looptrace, FakeClock]:
    """Return a looptrace on a fake clock whose metrics go to `reader`, and the clock."""
    clock = FakeClock()
    provider = MeterProvider(metric_readers=[reader], **kwargs)
    lt = looptrace.configure(tracer_provider=TracerProvider(), meter_provider=provider, clock=clock)
    return lt, clock
