"""Prometheus gauges of the open steps' and sections' ages, computed when scraped (`open_ages`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from looptrace._export.open_ages import (
    SECTION_DESCRIPTION,
    SECTION_FAMILY,
    STEP_DESCRIPTION,
    STEP_FAMILY,
    OpenAges,
)


class OpenSectionsCollector(Collector):
    """Serves `looptrace_step_open_seconds` and `looptrace_open_section_seconds` at each scrape."""

    def __init__(self, ages: OpenAges, label: Callable[[str], str]) -> None:
        self._ages = ages
        self._label = label

    def collect(self) -> Iterator[Metric]:
        """Yield both gauges (no sample while nothing is open)."""
        steps, inner, _ = self._ages.read()
        for name, description, points in (
            (STEP_FAMILY, STEP_DESCRIPTION, steps),
            (SECTION_FAMILY, SECTION_DESCRIPTION, inner),
        ):
            if not points:
                continue
            names = [self._label(key) for key in points[0][0]]
            family = GaugeMetricFamily(name, description, labels=names)
            for attributes, value in points:
                family.add_metric([str(v) for v in attributes.values()], value)
            yield family
