"""Scraping looptrace's Prometheus endpoint in the tests."""

from __future__ import annotations

import bisect
import urllib.request
from typing import Any

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from looptrace._stats.buckets import BOUNDARIES_NS

from .ports import LOCALHOST

WINDOW = "looptrace_section_window_duration_seconds"


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Return `{sample name: {sorted labels: value}}` from an endpoint's /metrics."""
    with urllib.request.urlopen(f"http://{LOCALHOST}:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def openmetrics_scrape(port: int) -> list[Any]:
    """Return the samples of an endpoint's /metrics asked for in the OpenMetrics format."""
    request = urllib.request.Request(
        f"http://{LOCALHOST}:{port}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        text = response.read().decode()
    return [sample for family in openmetrics_families(text) for sample in family.samples]


def le_of(duration_ns: int) -> str:
    """Return the `le` label of the bucket a duration falls in."""
    index = bisect.bisect_left(BOUNDARIES_NS, duration_ns)  # `le`: value <= boundary
    return "+Inf" if index == len(BOUNDARIES_NS) else floatToGoString(BOUNDARIES_NS[index] / 1e9)  # type: ignore[no-untyped-call]
