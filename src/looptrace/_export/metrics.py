"""What looptrace's metrics are: names, units, descriptions and the attributes of a point.

Every metric path (the OTLP push, an application's MeterProvider, the Prometheus endpoint)
renders these same definitions, so a name or a label is written here once.
"""

from __future__ import annotations

from looptrace._export.encodable import encodable
from looptrace._stats.attributes import PATH, SPAN_NAME

DURATION_METRIC = "looptrace.section.duration"
DURATION_DESCRIPTION = "Duration of timed sections of the training or inference loop."
WINDOW_METRIC = "looptrace.section.window.duration"
WINDOW_DESCRIPTION = (
    "Exact quantiles of section durations over the latest reset() window the section ran in."
)
DROPPED_METRIC = "looptrace.spans.dropped"
DROPPED_DESCRIPTION = "Spans an exporter could not deliver (collector down, queue full)."
SECONDS = "s"
SPANS = "{span}"

QUANTILE = "quantile"  # the attribute (label) naming which quantile a window point is
QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))  # label value, SectionStats field


def section_attributes(path: str, base: dict[str, int]) -> dict[str, str | int]:
    """Return the attributes of a section's points: path, span name, then `base` (the rank).

    A path that cannot be encoded is escaped (see `encodable`), so it never fails a push or
    a scrape.
    """
    path = encodable(path)
    return {PATH: path, SPAN_NAME: path.rsplit(".", 1)[-1], **base}


ITEMS_METRIC = "looptrace.items"
ITEMS_DESCRIPTION = "Units (samples, tokens, ...) a timer counted with count() or iterate(items=)."
ITEMS_RATE_METRIC = "looptrace.items.window.rate"
ITEMS_RATE_DESCRIPTION = "Units per second of wall time over the latest reset() window."
UNIT = "looptrace.unit"  # the attribute naming the unit counted
ITEMS = "{item}"


def item_attributes(path: str, unit: str, base: dict[str, int]) -> dict[str, str | int]:
    """Return the attributes of a timer's count of `unit`: its path, span name, unit, rank."""
    return {**section_attributes(path, base), UNIT: encodable(unit)}
