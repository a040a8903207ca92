"""The Prometheus pull endpoint: looptrace's cumulative histograms in the text exposition format.

A `prometheus_client` custom collector renders the totals of `CumulativeHistograms` at every
scrape, with looptrace's explicit second buckets. (The SDK's Prometheus reader only serves what
a MeterProvider aggregated itself; looptrace's histograms are aggregated already.) A scraper
that asks for OpenMetrics (Prometheus does) also gets the buckets' exemplars.

=============================================  ================================================
``looptrace_section_duration_seconds``         histogram (`_bucket`, `_count`, `_sum`) with the
                                               labels ``looptrace_path``, ``span_name``,
                                               ``looptrace_rank``, ``looptrace_world_size``;
                                               buckets carry `trace_id`/`span_id` exemplars
``looptrace_section_window_duration_seconds``  summary-style quantiles (label ``quantile``:
                                               0.5, 0.9, 0.99) of the latest window, same labels
``looptrace_spans_dropped_total``              counter with ``looptrace_rank``,
                                               ``looptrace_world_size``
``looptrace_items_total``                      counter of the units a timer counted (`count()`,
                                               `iterate(items=)`): section labels plus
                                               ``looptrace_unit``; `rate()` gives units/s
``looptrace_items_window_rate``                gauge: units per second of the latest window
=============================================  ================================================
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from looptrace._export.cumulative import CumulativeHistograms
from looptrace._export.metrics import (
    DROPPED_DESCRIPTION,
    DURATION_DESCRIPTION,
    ITEMS_DESCRIPTION,
    ITEMS_RATE_DESCRIPTION,
    QUANTILE,
    QUANTILES,
    WINDOW_DESCRIPTION,
    item_attributes,
)
from looptrace._export.settings import PrometheusSettings
from looptrace._stats.buckets import BOUNDARIES_S
from looptrace._stats.errors import ConfigError

_log = logging.getLogger("looptrace")

DURATION_FAMILY = "looptrace_section_duration_seconds"
WINDOW_FAMILY = "looptrace_section_window_duration"
DROPPED_FAMILY = "looptrace_spans_dropped"
ITEMS_FAMILY = "looptrace_items"
ITEMS_RATE_FAMILY = "looptrace_items_window_rate"
_LE = (*(floatToGoString(b) for b in BOUNDARIES_S), "+Inf")  # type: ignore[no-untyped-call]


def label(attribute: str) -> str:
    """Return the Prometheus label of an attribute (`looptrace.path` -> `looptrace_path`)."""
    return attribute.replace(".", "_")


class SnapshotCollector(Collector):
    """Serves the section histograms, window quantiles and dropped-span counter at each scrape."""

    def __init__(self, histograms: CumulativeHistograms) -> None:
        self._histograms = histograms

    def collect(self) -> Iterator[Metric]:
        """Yield the three metric families with the current totals."""
        histograms = self._histograms
        series = sorted(histograms.series().items())
        rank = {label(k): str(v) for k, v in histograms.attributes.items()}
        names = [label(k) for k in histograms.labels("")]
        duration = HistogramMetricFamily(
            DURATION_FAMILY, DURATION_DESCRIPTION, labels=names, unit="seconds"
        )
        window = Metric(WINDOW_FAMILY, WINDOW_DESCRIPTION, "summary", unit="seconds")
        for path, s in series:
            labels = {label(k): str(v) for k, v in histograms.labels(path).items()}
            running = 0
            buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
            for index, (le, count) in enumerate(zip(_LE, s.buckets, strict=True)):
                running += count
                found = s.exemplars.get(index)
                if found is None:
                    buckets.append((le, running))
                else:
                    exemplar = Exemplar(found.labels, found.value, found.time_ns / 1e9)
                    buckets.append((le, running, exemplar))
            duration.add_metric(list(labels.values()), buckets, s.sum)
            for (quantile, _), value in zip(QUANTILES, s.quantiles, strict=False):
                window.add_sample(window.name, {**labels, QUANTILE: quantile}, value)
        yield duration
        yield window
        dropped = CounterMetricFamily(DROPPED_FAMILY, DROPPED_DESCRIPTION, labels=list(rank))
        dropped.add_metric(list(rank.values()), histograms.dropped_spans())
        yield dropped
        yield from _counted(histograms, rank)


def _counted(histograms: CumulativeHistograms, rank: dict[str, str]) -> Iterator[Metric]:
    """Yield the units counted and their latest rates, where a timer counted any."""
    totals = histograms.totals()
    if totals.items:
        names = [label(k) for k in item_attributes("", "", histograms.attributes)]
        items = CounterMetricFamily(ITEMS_FAMILY, ITEMS_DESCRIPTION, labels=names)
        rates = GaugeMetricFamily(ITEMS_RATE_FAMILY, ITEMS_RATE_DESCRIPTION, labels=names)
        for (path, unit), total in sorted(totals.items.items()):
            values = [str(v) for v in item_attributes(path, unit, histograms.attributes).values()]
            items.add_metric(values, total)
            rate = totals.rates.get((path, unit))
            if rate is not None:
                rates.add_metric(values, rate)
        yield items
        yield rates


class PrometheusEndpoint:
    """An HTTP server on its own daemon thread answering Prometheus scrapes."""

    def __init__(self, settings: PrometheusSettings, histograms: CumulativeHistograms) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SnapshotCollector(histograms))
        try:
            server, thread = start_http_server(settings.port, addr=settings.host, registry=registry)
        except OSError as error:
            raise ConfigError(
                f"{settings.source}: cannot listen on {settings.host}:{settings.port}: "
                f"{error.strerror or error}"
            ) from None
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread
        self.host = settings.host
        self.port: int = server.server_port
        _log.info("looptrace: Prometheus endpoint on http://%s:%d/metrics", self.host, self.port)

    def close(self) -> None:
        """Stop serving and release the port, at once rather than at the server's next poll.

        `shutdown()` is seen by the serving loop only between requests or every 0.5 s; a
        connection wakes it.
        """
        stopping = threading.Thread(target=self._server.shutdown, daemon=True)
        stopping.start()
        while stopping.is_alive():
            with contextlib.suppress(OSError):
                socket.create_connection((self.host, self.port), timeout=0.1).close()
            stopping.join(0.01)
        self._server.server_close()
        self._thread.join(timeout=1.0)
