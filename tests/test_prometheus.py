"""The Prometheus endpoint: its exposition, and a real Prometheus 2.42 scraping it."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import looptrace
from looptrace.testing import FakeClock

from .helpers.otlp_server import OtlpReceiver, wait_until
from .helpers.ports import LOCALHOST, free_port
from .helpers.prometheus import WINDOW, le_of, openmetrics_scrape, scrape
from .helpers.servers import Prometheus, binary


def test_endpoint_serves_cumulative_histograms_with_rank_labels() -> None:
    """Windows add up; buckets are cumulative with looptrace's `le` bounds; labels as documented."""
    port = free_port()
    clock = FakeClock()
    rank = looptrace.RankInfo(rank=1, world_size=2)
    lt = looptrace.configure(
        tracer_provider=TracerProvider(), clock=clock, rank=rank, prometheus=port
    )
    train = lt.timer("train")
    for duration in (0.003, 0.2):
        train.record("data")
        clock.advance(duration)
        train.stop()
        lt.reset()
    samples = scrape(port)
    lt.shutdown()
    labels = (
        ("looptrace_path", "root.train.data"),
        ("looptrace_rank", "1"),
        ("looptrace_world_size", "2"),
        ("span_name", "data"),
    )
    bounds = ["1e-06", "1.6e-06", "2.5e-06", "4e-06", "6.3e-06",
              "1e-05", "1.6e-05", "2.5e-05", "4e-05", "6.3e-05",
              "0.0001", "0.00016", "0.00025", "0.0004", "0.00063",
              "0.001", "0.0016", "0.0025", "0.004", "0.0063",
              "0.01", "0.016", "0.025", "0.04", "0.063",
              "0.1", "0.16", "0.25", "0.4", "0.63",
              "1.0", "1.6", "2.5", "4.0", "6.3",
              "10.0", "16.0", "25.0", "40.0", "63.0",
              "100.0", "160.0", "250.0", "400.0", "630.0",
              "1000.0", "+Inf"]  # fmt: skip
    cumulative = [0] * 18 + [1] * 9 + [2] * 20  # 3 ms in (2.5 ms, 4 ms], 0.2 s in (0.16, 0.25]
    buckets = {
        tuple(sorted((*labels, ("le", le)))): float(n)
        for le, n in zip(bounds, cumulative, strict=True)
    }
    data_path = ("looptrace_path", "root.train.data")
    assert {
        name: {key: value for key, value in values.items() if data_path in key}
        for name, values in samples.items()
        if name.startswith("looptrace_section_duration_seconds")
    } == {
        "looptrace_section_duration_seconds_bucket": buckets,
        "looptrace_section_duration_seconds_count": {labels: 2.0},
        "looptrace_section_duration_seconds_sum": {labels: pytest.approx(0.203)},
    }
    assert samples["looptrace_spans_dropped_total"] == {
        (("looptrace_rank", "1"), ("looptrace_world_size", "2")): 0.0
    }


def test_endpoint_serves_the_latest_windows_memory() -> None:
    """The memory gauge holds the figures of the latest window that read them, by name."""
    port = free_port()
    clock = FakeClock()
    rank = looptrace.RankInfo(rank=1, world_size=2)
    lt = looptrace.configure(
        tracer_provider=TracerProvider(), clock=clock, rank=rank, prometheus=port
    )
    with lt.timer("train").section("data"):
        clock.advance(0.01)
    snapshot = lt.reset()
    samples = scrape(port)
    lt.shutdown()
    assert snapshot.memory is not None and snapshot.memory.host_rss  # Linux reports it
    served = {
        dict(labels)["looptrace_memory"]: value
        for labels, value in samples["looptrace_memory_window_bytes"].items()
    }
    assert served == {
        key.removesuffix("_bytes"): value
        for key, value in snapshot.memory.metrics().items()
        if key.endswith("_bytes")
    }
    assert {
        dict(labels)["looptrace_rank"] for labels in samples["looptrace_memory_window_bytes"]
    } == {"1"}


def test_endpoint_binds_loopback_by_default_and_adds_the_local_rank() -> None:
    """A bare port binds 127.0.0.1 only; local rank r serves on port + r; shutdown frees it."""
    port = free_port()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        rank=looptrace.RankInfo(rank=3, local_rank=1, world_size=4, local_world_size=2),
        prometheus=str(port - 1),
    )
    pipeline = lt._outputs.on_reset[-1].__self__  # type: ignore[union-attr]
    assert (pipeline.prometheus.host, pipeline.prometheus.port) == (LOCALHOST, port)
    assert "looptrace_spans_dropped_total" in scrape(port)
    lt.shutdown()
    again = looptrace.configure(tracer_provider=TracerProvider(), prometheus=port)  # released
    assert "looptrace_spans_dropped_total" in scrape(port)
    again.shutdown()


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Start a real Prometheus server that scrapes a port chosen for looptrace's endpoint."""
    server = Prometheus(
        binary("LOOPTRACE_TEST_PROMETHEUS", "prometheus"),
        [free_port()],
        Path(tmp_path_factory.mktemp("prometheus")),
        features=("exemplar-storage",),
    )
    yield server
    server.stop()


def uniform(low: float, high: float, n: int) -> list[float]:
    """Return `n` durations evenly spread over (low, high), whose median is their middle."""
    return [low + (high - low) * (i + 0.5) / n for i in range(n)]


def test_real_prometheus_scrapes_and_computes_quantiles(prometheus: Prometheus) -> None:
    """Prometheus 2.42 stores the histograms; histogram_quantile(0.5) is within 10 % per path.

    From a 6 µs section up: the buckets reach down to 1 µs.
    """
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        clock=clock,
        rank=looptrace.RankInfo(rank=1, world_size=2),
        prometheus=f"{LOCALHOST}:{prometheus.target_ports[0]}",
        trace_every=0,
    )
    train = lt.timer("train")
    durations = {
        "data": uniform(0.12, 0.22, 401),
        "forward": uniform(1.1, 2.3, 401),
        "step": uniform(0.01, 1.0, 401),
        "tokenize": uniform(5e-6, 7e-6, 401),  # 8x off when the buckets began at 100 µs
    }
    for i in range(401):
        for name, values in durations.items():
            train.record(name)
            clock.advance(values[i])
        train.stop()
    lt.reset()
    try:
        per_path = "sum by (le, looptrace_path) (looptrace_section_duration_seconds_bucket)"
        query = f"histogram_quantile(0.5, {per_path})"

        def scraped() -> bool:
            return len(prometheus.query(query)) == 5

        assert wait_until(scraped, timeout=60, interval=0.5), prometheus.log.read_text()[-2000:]
        medians = {
            r["metric"]["looptrace_path"]: float(r["value"][1]) for r in prometheus.query(query)
        }
        series = prometheus.query(
            "group by (looptrace_path, span_name, looptrace_rank, looptrace_world_size, job) "
            "(looptrace_section_duration_seconds_bucket)"
        )
        dropped = prometheus.query("looptrace_spans_dropped_total")
    finally:
        lt.shutdown()
    for name, values in durations.items():
        true_median = sorted(values)[200]
        assert medians[f"root.train.{name}"] == pytest.approx(true_median, rel=0.10), name
    assert sorted(tuple(sorted(s["metric"].items())) for s in series) == [
        (
            ("job", "looptrace"),
            ("looptrace_path", path),
            ("looptrace_rank", "1"),
            ("looptrace_world_size", "2"),
            ("span_name", path.rsplit(".", 1)[-1]),
        )
        for path in (
            "root.train",
            "root.train.data",
            "root.train.forward",
            "root.train.step",
            "root.train.tokenize",
        )
    ]
    assert [float(s["value"][1]) for s in dropped] == [0.0]


def test_window_quantiles_and_exemplars_in_the_openmetrics_exposition() -> None:
    """Each path serves its window's exact quantiles; buckets carry the latest traced span."""
    port = free_port()
    clock = FakeClock()
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    lt = looptrace.configure(tracer_provider=provider, clock=clock, prometheus=port, trace_every=2)
    train = lt.timer("train")
    for seconds in (0.0045, 0.0041, 0.2, 0.003, 0.0042, 0.5):
        train.record("data")
        clock.advance(seconds)
        train.record()
    train.stop()
    snapshot = lt.reset()
    samples = openmetrics_scrape(port)
    lt.shutdown()
    window = {
        (s.labels["looptrace_path"], s.labels["quantile"]): s.value
        for s in samples
        if s.name == WINDOW
    }
    assert window == {
        (path, q): getattr(snapshot[path], stat)
        for path in ("root.train", "root.train.data")
        for q, stat in (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))
    }
    exemplars = {
        (s.labels["looptrace_path"], s.labels["le"]): (
            s.exemplar.labels["trace_id"],
            s.exemplar.labels["span_id"],
            s.exemplar.value,
            float(s.exemplar.timestamp),
        )
        for s in samples
        if s.name == "looptrace_section_duration_seconds_bucket" and s.exemplar is not None
    }
    expected = {}
    for span in memory.get_finished_spans():  # in the order they ended: the latest wins
        assert span.context is not None and span.end_time is not None
        duration = span.end_time - (span.start_time or 0)
        key = ((span.attributes or {})["looptrace.path"], le_of(duration))
        expected[key] = (
            f"{span.context.trace_id:032x}",
            f"{span.context.span_id:016x}",
            duration / 1e9,
            span.end_time / 1e9,
        )
    # Laps 0, 2 and 4 were traced: their 4.5 ms, 0.2 s and 4.2 ms data sections (4.5 ms and
    # 4.2 ms share a bucket; 4.2 ms is the later).
    assert sorted(le for path, le in expected if path == "root.train.data") == ["0.0063", "0.25"]
    assert exemplars == expected


def true_quantile(values: list[float], q: float) -> float:
    """Return the nearest-rank q-quantile: the ceil(q * n)-th smallest value."""
    return sorted(values)[max(math.ceil(q * len(values)) - 1, 0)]


def test_real_prometheus_serves_the_window_quantiles_within_1_percent(
    prometheus: Prometheus,
) -> None:
    """Prometheus's window quantiles equal the snapshot's, within 1 % of the truth, 5 µs-300 ms."""
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        clock=clock,
        prometheus=f"{LOCALHOST}:{prometheus.target_ports[0]}",
        trace_every=0,
    )
    timer = lt.timer("quantiles")
    bases = {"us5": 5e-6, "us80": 80e-6, "ms2": 2e-3, "ms40": 40e-3, "ms300": 0.3}
    # Spread over a factor of three, in an order that is not sorted.
    durations = {
        name: [base * (1 + 2 * ((i * 37) % 301) / 300) for i in range(301)]
        for name, base in bases.items()
    }
    for i in range(301):
        for name, values in durations.items():
            timer.record(name)
            clock.advance(values[i])
        timer.stop()
    snapshot = lt.reset()
    query = f'{WINDOW}{{looptrace_path=~"root.quantiles.+"}}'
    try:
        assert wait_until(lambda: len(prometheus.query(query)) == 15, timeout=60, interval=0.5)
        served = {
            (r["metric"]["looptrace_path"].rsplit(".", 1)[-1], r["metric"]["quantile"]): float(
                r["value"][1]
            )
            for r in prometheus.query(query)
        }
    finally:
        lt.shutdown()
    quantiles = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))
    assert served == {
        (name, q): pytest.approx(getattr(snapshot[f"root.quantiles.{name}"], stat), rel=0.01)
        for name in bases
        for q, stat in quantiles
    }
    assert served == {
        (name, q): pytest.approx(true_quantile(values, float(q)), rel=0.01)
        for name, values in durations.items()
        for q, _ in quantiles
    }


def test_real_prometheus_stores_exemplars_that_are_in_the_exported_trace(
    prometheus: Prometheus,
) -> None:
    """query_exemplars returns trace and span ids of spans the OTLP trace export delivered."""
    now_ns = time.time_ns()
    clock = FakeClock(epoch_ns=now_ns)
    with OtlpReceiver("grpc") as receiver:
        lt = looptrace.configure(
            tracer_provider=TracerProvider(),
            clock=clock,
            prometheus=f"{LOCALHOST}:{prometheus.target_ports[0]}",
            otlp_endpoint=receiver.endpoint,
            otlp_protocol="grpc",
            trace_every=3,
        )
        timer = lt.timer("exemplary")
        for step in range(9):
            timer.record("data")
            clock.advance(0.001 * (1 + step))
            timer.record("forward")
            clock.advance(0.05)
            timer.record()
        timer.stop()
        lt.reset()
        selector = 'looptrace_section_duration_seconds_bucket{looptrace_path=~"root.exemplary.*"}'

        def stored() -> list[dict[str, Any]]:
            return prometheus.query_exemplars(selector, now_ns / 1e9 - 600, now_ns / 1e9 + 600)

        try:
            assert wait_until(lambda: len(stored()) >= 4, timeout=60, interval=0.5), (
                prometheus.log.read_text()[-2000:]
            )
            found = stored()
        finally:
            lt.shutdown()
        spans = {(s["trace_id"], s["span_id"]): s for s in receiver.spans}
    exemplars = [
        (series["seriesLabels"]["looptrace_path"], series["seriesLabels"]["le"], e)
        for series in found
        for e in series["exemplars"]
    ]
    matched = []
    for path, le, exemplar in exemplars:
        span = spans[(exemplar["labels"]["trace_id"], exemplar["labels"]["span_id"])]
        duration = span["end"] - span["start"]
        assert (span["attributes"]["looptrace.path"], le_of(duration)) == (path, le)
        assert float(exemplar["value"]) == pytest.approx(duration / 1e9)
        matched.append((path, span["attributes"]["looptrace.step"]))
    # Steps 0, 3 and 6 were traced: their data sections fell in three buckets (1, 4, 7 ms).
    assert sorted(step for path, step in matched if path == "root.exemplary.data") == [0, 3, 6]


def bucket_exemplars(port: int) -> dict[tuple[str, str], float]:
    """Return `{(path, le): exemplar value}` of the `root.train.load` buckets with an exemplar."""
    return {
        (s.labels["looptrace_path"], s.labels["le"]): s.exemplar.value
        for s in openmetrics_scrape(port)
        if s.name == "looptrace_section_duration_seconds_bucket"
        and s.exemplar is not None
        and s.labels["looptrace_path"] == "root.train.load"
    }


@pytest.mark.parametrize("trace_every", [1, 0])
def test_an_exemplar_appears_once_its_window_is_counted(trace_every: int) -> None:
    """A traced section's exemplar waits for the reset that counts it; untraced ones have none."""
    port = free_port()
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(), clock=clock, prometheus=port, trace_every=trace_every
    )
    train = lt.timer("train")
    seen = []
    for seconds in (0.002, 0.03):
        with train.section("load"):
            clock.advance(seconds)
        seen.append(bucket_exemplars(port))
        lt.reset()
        seen.append(bucket_exemplars(port))
    lt.shutdown()
    first = {("root.train.load", "0.0025"): 0.002}
    second = {("root.train.load", "0.04"): 0.03}
    expected = [{}, first, first, {**first, **second}] if trace_every else [{}] * 4
    assert seen == expected
