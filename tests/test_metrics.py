"""looptrace's metrics reach an application's MeterProvider pre-aggregated, as the snapshot."""

from __future__ import annotations

import random
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace._export.cumulative import CumulativeHistograms
from looptrace._stats.buckets import BOUNDARIES_S
from looptrace.testing import Capture, FakeClock

from .helpers.metrics import (
    DURATION,
    METRICS,
    configured,
    histogram_of,
    points_of,
)
from .helpers.otlp_server import OtlpReceiver, wait_until

# every rank's few series (its steps, their p50/p99, its time outside wait sections) beside
# its detail (the section histograms and quantiles, the dropped spans)


def _expected(*windows: looptrace.Snapshot) -> dict[str, dict[str, Any]]:
    """Return per path the histogram the windows add up to."""
    result: dict[str, dict[str, Any]] = {}
    for path in {p for w in windows for p in w}:
        stats = [w[path] for w in windows if path in w]
        result[path] = {
            "bounds": BOUNDARIES_S,
            "buckets": tuple(map(sum, zip(*(s.buckets for s in stats), strict=True))),
            "count": sum(s.count for s in stats),
            "sum": round(sum(s.total for s in stats), 9),
            "min": round(min(s.min for s in stats), 9),
            "max": round(max(s.max for s in stats), 9),
        }
    return result


def _window(lt: looptrace.Looptrace, clock: FakeClock, seed: int) -> looptrace.Snapshot:
    rng = random.Random(seed)
    train = lt.timer("training")
    for _ in range(200):
        train.record("data")
        clock.advance(rng.lognormvariate(-6, 1.5))
        train.record("forward")
        clock.advance(rng.lognormvariate(-3, 0.5))
        train.record()
    train.stop()
    return lt.reset()


def test_histogram_matches_snapshot_buckets_count_and_sum(cap: Capture) -> None:
    """Bucket counts, count, sum, min and max of the metric equal the snapshot's, per path."""
    snap = _window(cap.lt, cap.clock, seed=7)
    points = points_of(cap.metrics.get_metrics_data())
    assert {path: histogram_of(p) for path, p in points.items()} == _expected(snap)


def test_cumulative_reader_gets_the_totals_of_all_windows() -> None:
    """A cumulative reader sees the windows added up, with the first window's start time."""
    reader = InMemoryMetricReader()
    lt, clock = configured(reader)
    first = _window(lt, clock, seed=1)
    second = _window(lt, clock, seed=2)
    points = points_of(reader.get_metrics_data())
    lt.shutdown()
    assert {path: histogram_of(p) for path, p in points.items()} == _expected(first, second)
    assert {p.start_time_unix_nano for p in points.values()} == {first.start_ns}
    assert {p.time_unix_nano for p in points.values()} == {second.end_ns}


def test_windows_nobody_collected_for_long_all_reach_the_totals() -> None:
    """Many windows closed while nobody collected are each added up once."""
    reader = InMemoryMetricReader()
    lt, clock = configured(reader)
    windows = [_window(lt, clock, seed=seed) for seed in range(70)]
    points = points_of(reader.get_metrics_data())
    lt.shutdown()
    assert {path: histogram_of(p) for path, p in points.items()} == _expected(*windows)


class _HeldExporter(MetricExporter):
    """An application's metric exporter whose export waits until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Hold the export until released."""
        self.entered.set()
        self.release.wait(5)
        self.finished.set()
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing is buffered."""
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Let a held export go."""
        self.release.set()


def test_reset_does_not_wait_for_the_applications_metric_exporter() -> None:
    """reset() asks the provider to flush and returns; the app's export runs on another thread."""
    exporter = _HeldExporter()
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader])
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=TracerProvider(), meter_provider=provider, clock=clock)
    _window(lt, clock, seed=3)
    assert exporter.entered.wait(5)
    assert not exporter.finished.is_set()  # reset() returned with the export in progress
    exporter.release.set()
    lt.shutdown()
    provider.shutdown()


def test_delta_reader_gets_each_window_once() -> None:
    """A reader preferring delta temporality gets what was added since its last collection."""
    reader = InMemoryMetricReader(preferred_temporality={Histogram: AggregationTemporality.DELTA})
    lt, clock = configured(reader)
    first = _window(lt, clock, seed=1)
    after_first = points_of(reader.get_metrics_data())
    second = _window(lt, clock, seed=2)
    after_second = points_of(reader.get_metrics_data())
    lt.shutdown()
    assert {p: histogram_of(x) for p, x in after_first.items()} == _expected(first)
    assert {p: histogram_of(x) for p, x in after_second.items()} == _expected(second)
    assert {p.start_time_unix_nano for p in after_second.values()} == {first.end_ns}


def test_metric_attributes_are_path_span_name_and_rank(cap: Capture) -> None:
    """Each point carries looptrace.path, span.name and the rank attributes."""
    cap.lt.timer("training").record("forward")
    cap.clock.advance(0.5)
    cap.lt.timer("training").stop()  # a measurement counts in the window where it ends
    cap.lt.reset()
    points = points_of(cap.metrics.get_metrics_data())
    attributes: dict[str, Any] = dict(points["root.training.forward"].attributes or {})
    assert attributes == {
        "looptrace.path": "root.training.forward",
        "span.name": "forward",
        "looptrace.rank": 0,
        "looptrace.world_size": 1,
    }


def test_application_instruments_and_resource_are_kept() -> None:
    """The looptrace scope joins the application's own metrics under the provider's resource."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource.create({"service.name": "app"})
    )
    provider.get_meter("app").create_counter("app.samples").add(5)
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=TracerProvider(), meter_provider=provider, clock=clock)
    _window(lt, clock, seed=3)
    lt.shutdown()
    data = reader.get_metrics_data()
    assert data is not None
    (resource_metrics,) = data.resource_metrics
    assert resource_metrics.resource.attributes["service.name"] == "app"
    assert {
        s.scope.name: sorted(m.name for m in s.metrics) for s in resource_metrics.scope_metrics
    } == {"app": ["app.samples"], "looptrace": sorted(METRICS)}


def test_nothing_reaches_metrics_before_reset(cap: Capture) -> None:
    """No value is recorded per section: nothing is collected until reset()."""
    train = cap.lt.timer("training")
    for _ in range(10):
        train.record("x")
        cap.clock.advance(0.01)
    assert cap.metrics.get_metrics_data() is None


def test_non_sdk_meter_provider_is_refused() -> None:
    """A MeterProvider looptrace cannot hand aggregated data to is a ConfigError naming it."""

    class Custom(NoOpMeterProvider):
        pass

    with pytest.raises(looptrace.ConfigError, match=r"meter_provider: .*got object"):
        looptrace.configure(tracer_provider=TracerProvider(), meter_provider=object())  # type: ignore[arg-type]
    lt = looptrace.configure(tracer_provider=TracerProvider(), meter_provider=Custom())
    lt.shutdown()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_application_exporter_delivers_the_snapshot(protocol: str) -> None:
    """The application's own OTLP exporter delivers looptrace's buckets at reset()."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
        OTLPMetricExporter as GrpcExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpExporter,
    )

    with OtlpReceiver(protocol) as rx:
        exporter = (
            GrpcExporter(endpoint=rx.endpoint, insecure=True)
            if protocol == "grpc"
            else HttpExporter(endpoint=f"{rx.endpoint}/v1/metrics")
        )
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
        provider = MeterProvider(metric_readers=[reader])
        clock = FakeClock()
        lt = looptrace.configure(
            tracer_provider=TracerProvider(), meter_provider=provider, clock=clock
        )
        snap = _window(lt, clock, seed=4)
        assert rx.wait_for_metrics(lambda m: DURATION in m)
        received = rx.latest_metrics()[DURATION]
        lt.shutdown()
        provider.shutdown()
    assert {
        path: {"buckets": tuple(p["buckets"]), "count": p["count"], "sum": p["sum"]}
        for path, p in received.items()
        if not path.startswith("_")
    } == {
        path: {"buckets": s.buckets, "count": s.count, "sum": round(s.total, 9)}
        for path, s in snap.items()
    }


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_failed_metric_pushes_reach_health(protocol: str) -> None:
    """A refused OTLP metrics push is counted in health(); the next push carries every count."""
    with OtlpReceiver(protocol) as rx:
        rx.metric_failures = 2
        clock = FakeClock()
        lt = looptrace.configure(
            clock=clock,
            tracer_provider=TracerProvider(),
            otlp_endpoint=rx.endpoint,
            otlp_protocol=protocol,
            metrics_exporter="otlp",
            otlp_timeout=10,
        )
        train = lt.timer("train")
        for failed in (1, 2):
            train.record("data")
            clock.advance(0.1)
            train.stop()
            lt.reset()
            assert wait_until(lambda: lt.health().failed_metric_pushes == failed, 10)  # noqa: B023
        train.record("data")
        clock.advance(0.1)
        train.stop()
        lt.reset()
        assert rx.wait_for_metrics(lambda m: DURATION in m)
        health = lt.health()
        lt.shutdown()
    assert rx.latest_metrics()[DURATION]["root.train.data"]["count"] == 3
    assert health == looptrace.Health(failed_metric_pushes=2)


def test_sdk_without_the_reader_hook_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """An SDK whose MeterProvider keeps its readers elsewhere fails loudly, not silently."""
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    # As an SDK that renamed them would: the readers (1.43 on) and the configuration's (before).
    monkeypatch.delattr(provider, "_metric_readers", raising=False)
    monkeypatch.setattr(provider, "_sdk_config", SimpleNamespace(resource=Resource.create()))
    with pytest.raises(looptrace.ConfigError, match=r"opentelemetry-sdk has no MeterProvider"):
        looptrace.configure(tracer_provider=TracerProvider(), meter_provider=provider)
    monkeypatch.undo()
    provider.shutdown()


def test_a_failing_render_leaves_the_applications_metrics_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If looptrace's part of a collection fails, the reader still gets the app's metrics."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("app").create_counter("app.samples").add(5)
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=TracerProvider(), meter_provider=provider, clock=clock)

    def broken(*_args: object) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(CumulativeHistograms, "scope_metrics", broken)
    _window(lt, clock, seed=5)
    data = reader.get_metrics_data()
    health = lt.health()
    lt.shutdown()
    assert data is not None
    assert [s.scope.name for s in data.resource_metrics[0].scope_metrics] == ["app"]
    assert health.internal_errors >= 1
