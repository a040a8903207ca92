"""OTLP exponential histograms of section durations: `configure(histogram="exponential")`."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    ExponentialHistogramDataPoint,
    Histogram,
    InMemoryMetricReader,
    MetricsData,
)
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace._export.exponential import SCALE, bucket_index, lower_bound
from looptrace._stats.aggregator import Aggregator
from looptrace.testing import FakeClock

from .helpers.otlp_server import OtlpReceiver
from .helpers.otlp_wire import metric_points

DURATION = "looptrace.section.duration"
PATH = "root.train.step"


@pytest.fixture(params=["grpc", "http/protobuf"])
def receiver(request: pytest.FixtureRequest) -> Iterator[OtlpReceiver]:
    """Yield a running OTLP receiver for each protocol."""
    with OtlpReceiver(request.param) as rx:
        yield rx


def collected(reader: InMemoryMetricReader) -> MetricsData:
    """Return what the reader collects now (looptrace's metrics are always there)."""
    data = reader.get_metrics_data()
    assert data is not None
    return data


def duration_points(data: MetricsData) -> dict[str, Any]:
    """Return the duration metric's points by path."""
    metric = next(
        m
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == DURATION
    )
    return {str(p.attributes["looptrace.path"]): p for p in metric.data.data_points}


def run_windows(
    lt: looptrace.Looptrace, clock: FakeClock, windows: list[list[float]]
) -> list[looptrace.Snapshot]:
    """Time one `step` section per duration (seconds), resetting after each window."""
    train = lt.timer("train")
    snapshots = []
    for durations in windows:
        for seconds in durations:
            with train.section("step"):
                clock.advance(seconds)
        snapshots.append(lt.reset())
    return snapshots


def log_uniform(n: int, seed: int) -> list[float]:
    """Return `n` durations spread evenly in log from 100 µs to 10 s, whole nanoseconds."""
    rng = random.Random(seed)
    return [round(10 ** rng.uniform(-4, 1), 9) for _ in range(n)]


def bucket_quantile(point: ExponentialHistogramDataPoint, q: float) -> tuple[float, float]:
    """Return the bounds of the bucket holding the q-quantile (nearest rank) of a point."""
    rank = max(math.ceil(q * point.count) - 1, 0)
    seen = 0
    for i, count in enumerate(point.positive.bucket_counts):
        seen += count
        if seen > rank:
            index = point.positive.offset + i
            return lower_bound(index), lower_bound(index + 1)
    raise AssertionError("rank beyond the buckets")


def exponential_lt(clock: FakeClock, **kwargs: Any) -> tuple[looptrace.Looptrace, Any]:
    """Configure looptrace with exponential histograms read by an in-memory reader."""
    reader = InMemoryMetricReader()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        meter_provider=MeterProvider(metric_readers=[reader]),
        clock=clock,
        **kwargs,
    )
    return lt, reader


def test_each_value_lies_in_its_bucket_and_buckets_are_half_a_percent_wide() -> None:
    """`bucket_index(v)` satisfies `base**i < v <= base**(i+1)`; neighbour bounds 0.54 % apart."""
    rng = random.Random(7)
    values = [10 ** rng.uniform(-9, 5) for _ in range(2000)] + [1.0, 2.0, 0.5, 1024.0]
    for value in values:
        index = bucket_index(value)
        assert lower_bound(index) < value <= lower_bound(index + 1) * (1 + 1e-12)
    assert bucket_index(1.0) == -1 and bucket_index(2.0) == 2**SCALE - 1
    assert lower_bound(1) / lower_bound(0) - 1 == pytest.approx(0.00543, abs=1e-5)


@pytest.mark.parametrize("n", [800, 5000], ids=["exact", "sketch"])
def test_quantiles_from_the_buckets_are_within_1_percent_of_the_snapshots(n: int) -> None:
    """p50/p90/p99 read from the buckets (either bound) are within 1 % of the snapshot's."""
    clock = FakeClock()
    lt, reader = exponential_lt(clock, histogram="exponential")
    (snapshot,) = run_windows(lt, clock, [log_uniform(n, seed=n)])
    point = duration_points(collected(reader))[PATH]
    lt.shutdown()
    stats = snapshot[PATH]
    assert isinstance(point, ExponentialHistogramDataPoint)
    assert (point.count, point.scale, point.zero_count) == (n, SCALE, 0)
    assert sum(point.positive.bucket_counts) == n
    assert point.sum == pytest.approx(stats.total)
    for q, expected in ((0.5, stats.p50), (0.9, stats.p90), (0.99, stats.p99)):
        low, high = bucket_quantile(point, q)
        assert abs(low - expected) <= 0.01 * expected, (q, low, expected)
        assert abs(high - expected) <= 0.01 * expected, (q, high, expected)


def test_buckets_add_up_over_the_run_within_1_percent_of_exact_quantiles() -> None:
    """Cumulative over three windows: the buckets' quantiles are the run's within 1 %."""
    clock = FakeClock()
    lt, reader = exponential_lt(clock, histogram="exponential")
    windows = [log_uniform(700, seed=s) for s in (1, 2, 3)]
    run_windows(lt, clock, windows)
    point = duration_points(collected(reader))[PATH]
    lt.shutdown()
    every = sorted(v for window in windows for v in window)
    assert point.count == sum(point.positive.bucket_counts) == len(every)
    for q in (0.5, 0.9, 0.99):
        exact = every[max(math.ceil(q * len(every)) - 1, 0)]
        low, high = bucket_quantile(point, q)
        assert low < exact <= high * (1 + 1e-12)  # the exact value's own bucket
        assert high / low - 1 < 0.01


def test_the_sdks_otlp_encoding_round_trips_the_buckets() -> None:
    """The SDK's OTLP protobuf encoder carries scale, offset, counts, sum, min, max unchanged."""
    clock = FakeClock()
    lt, reader = exponential_lt(clock, histogram="exponential")
    run_windows(lt, clock, [log_uniform(1500, seed=5)])
    data = collected(reader)
    lt.shutdown()
    sent = duration_points(data)
    wire = ExportMetricsServiceRequest.FromString(encode_metrics(data).SerializeToString())
    (metric,) = [
        m
        for rm in wire.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == DURATION
    ]
    received = metric_points(metric)
    assert received.pop("_temporality") == AggregationTemporality.CUMULATIVE.value
    assert set(received) == set(sent) == {"root.train", PATH}
    for path, point in sent.items():
        entry = received[path]
        assert {key: entry[key] for key in entry if key not in ("attributes", "start", "time")} == {
            "count": point.count,
            "sum": round(point.sum, 9),
            "scale": SCALE,
            "zero_count": 0,
            "offset": point.positive.offset,
            "buckets": list(point.positive.bucket_counts),
            "negative": [],
            "min": point.min,
            "max": point.max,
        }


def test_a_real_otlp_receiver_gets_exponential_histograms(receiver: OtlpReceiver) -> None:
    """Pushed over OTLP: one exponential histogram per section, cumulative over windows."""
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        clock=clock,
        otlp_endpoint=receiver.endpoint,
        otlp_protocol=receiver.protocol,
        traces_exporter="none",
        histogram="exponential",
    )
    first, second = run_windows(lt, clock, [[0.1, 0.1], [0.004]])
    assert receiver.wait_for_metrics(lambda m: m[DURATION].get(PATH, {}).get("count") == 3)
    lt.shutdown()
    point = receiver.latest_metrics()[DURATION][PATH]
    point.pop("exemplars", None)
    buckets = [0] * (-426 - -1020 + 1)
    buckets[0] = 1  # 0.004 s in (2^(-1020/128), 2^(-1019/128)]
    buckets[-1] = 2  # 0.1 s in (2^(-426/128), 2^(-425/128)]
    assert point == {
        "attributes": {
            "looptrace.path": PATH,
            "span.name": "step",
            "looptrace.rank": 0,
            "looptrace.world_size": 1,
        },
        "start": first.start_ns,
        "time": second.end_ns,
        "count": 3,
        "sum": 0.204,
        "scale": 7,
        "zero_count": 0,
        "offset": -1020,
        "buckets": buckets,
        "negative": [],
        "min": 0.004,
        "max": 0.1,
    }


def test_the_variable_chooses_exponential(monkeypatch: pytest.MonkeyPatch) -> None:
    """`LOOPTRACE_HISTOGRAM=exponential` gives exponential histograms without the argument."""
    monkeypatch.setenv("LOOPTRACE_HISTOGRAM", "Exponential")
    clock = FakeClock()
    lt, reader = exponential_lt(clock)
    run_windows(lt, clock, [[0.5]])
    point = duration_points(collected(reader))[PATH]
    lt.shutdown()
    assert isinstance(point, ExponentialHistogramDataPoint)
    assert (point.positive.offset, list(point.positive.bucket_counts)) == (-129, [1])


def test_explicit_buckets_stay_the_default() -> None:
    """Without the setting the duration metric is the explicit-bucket histogram."""
    clock = FakeClock()
    lt, reader = exponential_lt(clock)
    run_windows(lt, clock, [[0.5]])
    data = collected(reader)
    lt.shutdown()
    (metric,) = [
        m
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == DURATION
    ]
    assert isinstance(metric.data, Histogram)


def test_delta_readers_get_each_windows_buckets_once() -> None:
    """A delta-temporality reader gets each window's exponential counts, not the totals."""
    clock = FakeClock()
    reader = InMemoryMetricReader(
        preferred_temporality={HistogramInstrument: AggregationTemporality.DELTA}
    )
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        meter_provider=MeterProvider(metric_readers=[reader]),
        clock=clock,
        histogram="exponential",
    )
    run_windows(lt, clock, [[0.5, 0.5]])
    first = duration_points(collected(reader))[PATH]
    run_windows(lt, clock, [[0.5]])
    second = duration_points(collected(reader))[PATH]
    lt.shutdown()
    assert [list(p.positive.bucket_counts) for p in (first, second)] == [[2], [1]]


@pytest.mark.parametrize(
    ("argument", "variable", "message"),
    [
        ("expo", "", "histogram: expected 'explicit' or 'exponential', got 'expo'"),
        (7, "", "histogram: expected 'explicit' or 'exponential', got 7"),
        (None, "native", "LOOPTRACE_HISTOGRAM: expected 'explicit' or 'exponential', got 'native'"),
    ],
)
def test_a_bad_value_is_a_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, argument: object, variable: str, message: str
) -> None:
    """A value that is neither kind is a `ConfigError` naming the argument or the variable."""
    monkeypatch.setenv("LOOPTRACE_HISTOGRAM", variable)
    with pytest.raises(looptrace.ConfigError) as error:
        looptrace.configure(tracer_provider=TracerProvider(), histogram=argument)  # type: ignore[arg-type]
    assert str(error.value) == message


@pytest.mark.parametrize("n", [10, 3000], ids=["exact", "sketch"])
def test_a_window_keeps_its_durations_after_its_statistics_are_read(n: int) -> None:
    """With `keep_distributions`, durations outlive the statistics until released."""
    aggregator = Aggregator()
    aggregator.keep_distributions = True
    values = list(range(1000, 1000 + n))
    aggregator.merge(PATH, list(values), 0, 0)
    snapshot = aggregator.snapshot(start_ns=0, end_ns=1, rank=0)
    assert snapshot[PATH].count == n  # read first, as a user would
    pairs = snapshot.distribution(PATH)
    assert pairs is not None and sum(count for _, count in pairs) == n
    if n == 10:
        assert sorted(pairs) == [(float(v), 1) for v in values]
    else:
        assert all(abs(value - round(value)) < 0.011 * value for value, _ in pairs)
    snapshot.release_distributions()
    assert snapshot.distribution(PATH) is None


def test_a_window_does_not_keep_durations_unless_asked() -> None:
    """By default a read path's durations are dropped with its source: no memory kept."""
    aggregator = Aggregator()
    aggregator.merge(PATH, [5, 6], 0, 0)
    snapshot = aggregator.snapshot(start_ns=0, end_ns=1, rank=0)
    assert snapshot.distribution(PATH) == [(5.0, 1), (6.0, 1)]  # still unread: the source
    assert snapshot[PATH].count == 2
    assert snapshot.distribution(PATH) is None


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    """Initialise a real 1-rank gloo process group in this process; destroy it after."""
    dist = pytest.importorskip("torch.distributed")
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.usefixtures("one_rank")
def test_a_cross_rank_reset_keeps_every_duration_in_the_buckets() -> None:
    """`reset(across_ranks=True)` reads the statistics first; the buckets still hold all."""
    clock = FakeClock()
    lt, reader = exponential_lt(clock, histogram="exponential")
    train = lt.timer("train")
    for seconds in log_uniform(1500, seed=9):
        with train.section("step"):
            clock.advance(seconds)
    snapshot = lt.reset(across_ranks=True)
    point = duration_points(collected(reader))[PATH]
    lt.shutdown()
    assert snapshot.across_ranks is not None
    assert sum(point.positive.bucket_counts) == point.count == 1500
