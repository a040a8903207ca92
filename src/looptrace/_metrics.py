"""Hands aggregated durations to an application's MeterProvider as a seconds histogram."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.metrics import MeterProvider

from looptrace import __version__
from looptrace._attributes import PATH, SPAN_NAME
from looptrace._buckets import BOUNDARIES_S
from looptrace._health import Incidents

DURATION_METRIC = "looptrace.section.duration"


class HistogramRecorder:
    """Records each folded duration through `looptrace.section.duration` (unit `s`).

    Batches are merged at `reset()` (or when a thread holds thousands), never per section, so no
    metrics-API call sits on the hot path. The instrument asks for looptrace's explicit
    second boundaries, never the SDK's millisecond defaults.
    """

    def __init__(
        self, meter_provider: MeterProvider, attributes: dict[str, int], incidents: Incidents
    ) -> None:
        self._incidents = incidents
        meter = meter_provider.get_meter("looptrace", __version__)
        self._histogram = meter.create_histogram(
            DURATION_METRIC,
            unit="s",
            description="Duration of timed sections of the training or inference loop.",
            explicit_bucket_boundaries_advisory=BOUNDARIES_S,
        )
        self._base = attributes
        self._attributes: dict[str, dict[str, str | int]] = {}

    def __call__(self, path: str, durations_ns: Sequence[int]) -> None:
        """Record one value per measurement; a failing SDK is counted, never raised."""
        try:
            attributes = self._attributes.get(path)
            if attributes is None:
                attributes = self._attributes[path] = self.attributes_of(path)
            record = self._histogram.record
            for duration_ns in durations_ns:
                record(duration_ns / 1e9, attributes)
        except Exception:
            self._incidents.failed("HistogramRecorder")

    def attributes_of(self, path: str) -> dict[str, str | int]:
        """Return the metric attributes of a path: path, span name and rank."""
        return {PATH: path, SPAN_NAME: path.rsplit(".", 1)[-1], **self._base}
