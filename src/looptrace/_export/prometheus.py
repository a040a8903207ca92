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
``looptrace_memory_window_bytes``              gauge of the latest window's memory, label
                                               ``looptrace_memory``: ``host_rss``,
                                               ``host_peak_rss``, ``device_peak_allocated``,
                                               ``device_peak_reserved`` (where measured)
``looptrace_system_window``                    gauge of the latest window's system figures,
                                               label ``looptrace_system``:
                                               ``host_cpu_percent.max`` ... (a sampler runs)
``looptrace_rank_steps_total``                 counter: laps of each outermost timer (steps)
``looptrace_rank_step_window_duration_seconds``  gauge: the step's p50 and p99 (``quantile``) of
                                               the latest window
``looptrace_rank_outside_wait_seconds_total``  counter: lap time outside wait sections
``looptrace_job_section_duration_seconds``     histogram of every rank's durations summed in the
                                               reduce of `reset(across_ranks=True)`; no rank
                                               label; served by one rank (`job_rank`)
``looptrace_job_section_window_duration_seconds``  the ranks' highest window quantiles
``looptrace_job_straggler_rank``,              gauges of the latest cross-rank window's
``looptrace_job_straggler_excess_seconds``,    straggler, and of a chronic straggler
``looptrace_job_chronic_straggler_rank``
``looptrace_job_items_window_rate``            gauge: the job's units per second (the ranks'
                                               rates summed) per path and ``looptrace_unit``,
                                               latest cross-rank window that counted them
``looptrace_job_items_window_rank_rate``       gauge: the lowest and highest rank's units per
                                               second (``looptrace_extreme``: min, max)
``looptrace_job_items_slowest_rank``           gauge: the rank with the fewest units per second
=============================================  ================================================

Every rank serves the `rank_` series and its units counted. The section histograms and
quantiles, the window rates, the memory and the dropped-span counter are its detail: served by every
rank until a cross-rank window names the ranks that serve it (`configure(detail_ranks=...)`),
the dropped-span counter also once it is above zero.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from errno import EADDRINUSE
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

from looptrace._base.errors import ConfigError
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
from looptrace._export.prometheus_scale import (
    job_families,
    memory_families,
    rank_families,
    system_families,
)
from looptrace._export.settings import PrometheusSettings
from looptrace._export.totals import Totals
from looptrace._stats.buckets import BOUNDARIES_S

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
        """Yield the metric families with the current totals.

        A rank that serves no detail (see `looptrace._export.job_metrics`) leaves out the
        section histograms and quantiles, the window rates, and the dropped spans while none
        were dropped.
        """
        histograms = self._histograms
        totals, detail = histograms.view()
        rank = {label(k): str(v) for k, v in histograms.attributes.items()}
        if detail:
            yield from self._detail(totals)
            yield from memory_families(totals, histograms.attributes, label)
            yield from system_families(totals, histograms.attributes, label)
        dropped_spans = histograms.dropped_spans()
        if detail or dropped_spans:
            dropped = CounterMetricFamily(DROPPED_FAMILY, DROPPED_DESCRIPTION, labels=list(rank))
            dropped.add_metric(list(rank.values()), dropped_spans)
            yield dropped
        yield from _counted(totals, histograms.attributes, detail=detail)
        yield from rank_families(totals, histograms.attributes, label)
        yield from job_families(totals, histograms.attributes, label)

    def _detail(self, totals: Totals) -> Iterator[Metric]:
        """Yield the section histograms and window quantiles of every path."""
        histograms = self._histograms
        series = sorted(totals.series.items())
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


def _counted(totals: Totals, base: dict[str, int], *, detail: bool) -> Iterator[Metric]:
    """Yield the units counted and (with detail) their latest rates, where any were."""
    if totals.items:
        names = [label(k) for k in item_attributes("", "", base)]
        items = CounterMetricFamily(ITEMS_FAMILY, ITEMS_DESCRIPTION, labels=names)
        rates = GaugeMetricFamily(ITEMS_RATE_FAMILY, ITEMS_RATE_DESCRIPTION, labels=names)
        for (path, unit), total in sorted(totals.items.items()):
            values = [str(v) for v in item_attributes(path, unit, base).values()]
            items.add_metric(values, total)
            rate = totals.rates.get((path, unit))
            if rate is not None:
                rates.add_metric(values, rate)
        yield items
        if detail:
            yield rates


def _in_use(settings: PrometheusSettings) -> str:
    """Return the likely cause of a port in use, and the settings that change the port."""
    return (
        f"; another process listens there, most likely another looptrace process with the "
        f"same local rank (this one is local rank {settings.local_rank}, and each process "
        "listens on the port plus its local rank): give each process of a node its own "
        "LOCAL_RANK, or choose the port with configure(prometheus=PORT) or "
        "OTEL_EXPORTER_PROMETHEUS_PORT (prometheus=0: any free port)"
    )


class PrometheusEndpoint:
    """An HTTP server on its own daemon thread answering Prometheus scrapes."""

    def __init__(self, settings: PrometheusSettings, histograms: CumulativeHistograms) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SnapshotCollector(histograms))
        self.registry = registry  # (the open sections' gauges join it once the engine exists)
        try:
            server, thread = start_http_server(settings.port, addr=settings.host, registry=registry)
        except OSError as error:
            raise ConfigError(
                f"{settings.source}: cannot listen on {settings.host}:{settings.port}: "
                f"{error.strerror or error}{_in_use(settings) if error.errno == EADDRINUSE else ''}"
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
