"""The OTLP metric shapes looptrace serves: gauges, monotonic sums and explicit histograms.

Every metric output builds its `Metric`s here from `(attributes, value)` points or from
cumulative `Series`, so the rank's, the job's, the memory, system and open-age series share
one shape; what the values are is the business of their modules (`cumulative`, `job_metrics`,
`system_metrics`, `open_ages`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    Sum,
)

from looptrace._stats.buckets import BOUNDARIES_S

if TYPE_CHECKING:
    from looptrace._export.exemplars import TraceExemplar
    from looptrace._export.totals import Series

Attributes = dict[str, str | int]
Points = list[tuple[Attributes, float]]


def gauge(
    name: str, description: str, unit: str, points: Points, *, start: int, now: int
) -> Metric:
    """Return a gauge of `points`, each `(attributes, value)`."""
    return Metric(
        name=name,
        description=description,
        unit=unit,
        data=Gauge(data_points=number_points(points, start, now)),
    )


def counter(
    name: str,
    description: str,
    unit: str,
    points: Points,
    *,
    start: int,
    now: int,
    temporality: AggregationTemporality,
) -> Metric:
    """Return a monotonic sum of `points`, cumulative or delta as `temporality` says."""
    return Metric(
        name=name,
        description=description,
        unit=unit,
        data=Sum(
            data_points=number_points(points, start, now),
            aggregation_temporality=temporality,
            is_monotonic=True,
        ),
    )


def histogram(
    name: str,
    description: str,
    unit: str,
    series: Iterable[tuple[Attributes, Series]],
    *,
    start: int,
    now: int,
    temporality: AggregationTemporality,
) -> Metric:
    """Return an explicit-bucket histogram (`BOUNDARIES_S`) of `series`, with their exemplars."""
    return Metric(
        name=name,
        description=description,
        unit=unit,
        data=Histogram(
            data_points=[
                HistogramDataPoint(
                    attributes=attributes,
                    start_time_unix_nano=start,
                    time_unix_nano=now,
                    count=s.count,
                    sum=s.sum,
                    bucket_counts=s.buckets,
                    explicit_bounds=BOUNDARIES_S,
                    min=s.min,
                    max=s.max,
                    exemplars=otlp_exemplars(s),
                )
                for attributes, s in series
            ],
            aggregation_temporality=temporality,
        ),
    )


def number_points(points: Points, start: int, now: int) -> list[NumberDataPoint]:
    """Return `points` as OTLP number points from `start` to `now` (epoch ns)."""
    return [
        NumberDataPoint(
            attributes=attributes, start_time_unix_nano=start, time_unix_nano=now, value=value
        )
        for attributes, value in points
    ]


def otlp_exemplars(series: Series) -> list[Exemplar]:
    """Return the exemplars of `series` as OTLP exemplars, by bucket."""
    return [_otlp_exemplar(e) for _, e in sorted(series.exemplars.items())]


def _otlp_exemplar(exemplar: TraceExemplar) -> Exemplar:
    return Exemplar(
        filtered_attributes={},
        value=exemplar.value,
        time_unix_nano=exemplar.time_ns,
        span_id=exemplar.span_id,
        trace_id=exemplar.trace_id,
    )
