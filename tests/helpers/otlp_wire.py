"""OTLP protobuf messages as plain dicts, as the test receiver stores them."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def attributes(values: Any) -> dict[str, Any]:
    """Return OTLP `KeyValue`s as a plain dict."""
    return {kv.key: _value(kv.value) for kv in values}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def metric_points(metric: Any) -> dict[str, Any]:
    """Return a metric's points by path (and quantile), with temporality and monotonicity."""
    kind = metric.WhichOneof("data")
    data = getattr(metric, kind)
    points: dict[str, Any] = {}
    for point in data.data_points:
        attrs = attributes(point.attributes)
        key = attrs.get("looptrace.path", "")
        if "quantile" in attrs:  # the window quantiles: one point per path and quantile
            key = f"{key} q{attrs['quantile']}"
        entry: dict[str, Any] = {
            "attributes": attrs,
            "start": point.start_time_unix_nano,
            "time": point.time_unix_nano,
        }
        if kind == "histogram":
            entry.update(
                count=point.count,
                sum=round(point.sum, 9),
                buckets=list(point.bucket_counts),
                bounds=list(point.explicit_bounds),
                min=point.min,
                max=point.max,
            )
            if point.exemplars:
                entry["exemplars"] = [
                    {
                        "value": e.as_double,
                        "time": e.time_unix_nano,
                        "trace_id": e.trace_id.hex(),
                        "span_id": e.span_id.hex(),
                    }
                    for e in point.exemplars
                ]
        elif kind == "exponential_histogram":
            entry.update(
                count=point.count,
                sum=round(point.sum, 9),
                scale=point.scale,
                zero_count=point.zero_count,
                offset=point.positive.offset,
                buckets=list(point.positive.bucket_counts),
                negative=list(point.negative.bucket_counts),
                min=point.min,
                max=point.max,
            )
        else:
            entry["value"] = (
                point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
            )
        points[key] = entry
    if kind != "gauge":
        points["_temporality"] = data.aggregation_temporality
    if kind == "sum":
        points["_monotonic"] = data.is_monotonic
    return points
