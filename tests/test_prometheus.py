"""The Prometheus endpoint: its exposition, and a real Prometheus 2.42 scraping it."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client.parser import text_string_to_metric_families

import looptrace
from looptrace.testing import FakeClock

from .otlp_server import LOCALHOST, free_port, wait_until
from .servers import Prometheus, binary


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Return `{sample name: {sorted labels: value}}` from an endpoint's /metrics."""
    with urllib.request.urlopen(f"http://{LOCALHOST}:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


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
    bounds = ["0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
              "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0", "25.0", "50.0",
              "100.0", "250.0", "500.0", "1000.0", "+Inf"]  # fmt: skip
    cumulative = [0] * 5 + [1] * 5 + [2] * 13
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
    )
    yield server
    server.stop()


def uniform(low: float, high: float, n: int) -> list[float]:
    """Return `n` durations evenly spread over (low, high), whose median is their middle."""
    return [low + (high - low) * (i + 0.5) / n for i in range(n)]


def test_real_prometheus_scrapes_and_computes_quantiles(prometheus: Prometheus) -> None:
    """Prometheus 2.42 stores the histograms; histogram_quantile(0.5) is within 10 % per path."""
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
            return len(prometheus.query(query)) == 4

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
        for path in ("root.train", "root.train.data", "root.train.forward", "root.train.step")
    ]
    assert [float(s["value"][1]) for s in dropped] == [0.0]
