"""reset() hands its window to each output's queue and returns: outputs fold and write elsewhere.

Each output is held (its totals' lock taken, as a long scrape or fold would; its file write
blocked) while the training thread resets: reset() still returns, the windows arrive in
order once the output moves again, a full queue drops windows with a count, and shutdown
delivers what is queued.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace._export.cumulative import CumulativeHistograms
from looptrace._export.exporters import ExportPipeline
from looptrace._export.line_file import LineFile
from looptrace._export.window_queue import MAX_QUEUED_WINDOWS
from looptrace.testing import FakeClock

from .helpers.otlp_server import OtlpReceiver, wait_until
from .helpers.ports import free_port
from .helpers.prometheus import WINDOW, scrape

PATH = "root.train.step"
HANG_GUARD_S = 20.0


def _windows(lt: looptrace.Looptrace, clock: FakeClock, count: int, first: int = 1) -> None:
    """Close `count` windows of one lap each; window k's lap lasts k ms, so order shows."""
    train = lt.timer("train")
    for k in range(first, first + count):
        train.record("step")
        clock.advance(k / 1e3)
        train.stop()
        lt.reset()


def _in_thread(work: Callable[[], object]) -> bool:
    """Run `work` on a thread of its own; return whether it finished within the hang guard."""
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    return not thread.is_alive()


def _totals_of(lt: looptrace.Looptrace) -> CumulativeHistograms:
    """Return the metric totals the outputs of `lt` read."""
    for sink in lt._outputs.on_reset:
        owner = getattr(sink, "__self__", None)
        if isinstance(owner, ExportPipeline):
            return owner.histograms
        if isinstance(owner, CumulativeHistograms):
            return owner
    raise AssertionError("no metric totals attached")


@contextmanager
def _held(lock: threading.Lock) -> Iterator[None]:
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _app_reading(data: MetricsData | None) -> tuple[int, float]:
    """Return the count of PATH and its latest window's p50 from an app reader's collection."""
    assert data is not None
    count, p50 = 0, float("nan")
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attributes = dict(point.attributes or {})
                    if attributes.get("looptrace.path") != PATH:
                        continue
                    if metric.name == "looptrace.section.duration":
                        count = point.count  # type: ignore[union-attr]
                    elif attributes.get("quantile") == "0.5":
                        p50 = point.value  # type: ignore[union-attr]
    return count, p50


def _prometheus_reading(port: int) -> tuple[int, float]:
    samples = scrape(port)
    labels = {"looptrace_path": PATH}
    count = next(
        v
        for k, v in samples["looptrace_section_duration_seconds_count"].items()
        if labels.items() <= dict(k).items()
    )
    p50 = next(
        v
        for k, v in samples[WINDOW].items()
        if {**labels, "quantile": "0.5"}.items() <= dict(k).items()
    )
    return int(count), p50


def test_reset_returns_while_the_app_readers_totals_are_held() -> None:
    """App MeterProvider totals held busy: resets return; the reader then sees all, in order."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=TracerProvider(), meter_provider=provider, clock=clock)
    with _held(_totals_of(lt).lock):
        returned = _in_thread(lambda: _windows(lt, clock, 40))
    assert returned
    assert _app_reading(reader.get_metrics_data()) == (40, pytest.approx(0.040))
    lt.shutdown()
    provider.shutdown()


def test_reset_returns_while_prometheus_totals_are_held() -> None:
    """Prometheus on, nobody scraping, totals held busy: resets return; a scrape sees all."""
    port = free_port()
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=TracerProvider(), clock=clock, prometheus=port)
    with _held(_totals_of(lt).lock):
        returned = _in_thread(lambda: _windows(lt, clock, 40))
    assert returned
    assert _prometheus_reading(port) == (40, pytest.approx(0.040))
    lt.shutdown()


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_reset_returns_while_otlp_metric_totals_are_held(protocol: str) -> None:
    """OTLP metrics on, totals held busy: resets return; shutdown pushes every window."""
    clock = FakeClock()
    with OtlpReceiver(protocol) as receiver:
        lt = looptrace.configure(
            tracer_provider=TracerProvider(),
            clock=clock,
            otlp_endpoint=receiver.endpoint,
            otlp_protocol=protocol,
            traces_exporter="none",
            metrics_exporter="otlp",
        )
        with _held(_totals_of(lt).lock):
            returned = _in_thread(lambda: _windows(lt, clock, 40))
        assert returned
        lt.shutdown()
        metrics = receiver.latest_metrics()
    assert metrics["looptrace.section.duration"][PATH]["count"] == 40
    window = metrics["looptrace.section.window.duration"]
    assert window[f"{PATH} q0.5"]["value"] == pytest.approx(0.040)


def test_windows_past_the_bound_are_dropped_and_counted() -> None:
    """Totals held while more than MAX_QUEUED_WINDOWS close: the rest are counted, not queued."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=TracerProvider(), meter_provider=provider, clock=clock)
    with _held(_totals_of(lt).lock):
        returned = _in_thread(lambda: _windows(lt, clock, MAX_QUEUED_WINDOWS + 3))
    assert returned
    assert lt.health() == looptrace.Health(dropped_windows=3)
    count, p50 = _app_reading(reader.get_metrics_data())
    assert (count, p50) == (MAX_QUEUED_WINDOWS, pytest.approx(MAX_QUEUED_WINDOWS / 1e3))
    lt.shutdown()
    provider.shutdown()


class _BlockedSnapshotFile:
    """Blocks writes to the snapshot file until released, noting the thread of each write."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: set[str] = set()
        write = LineFile.write

        def blocked(line_file: LineFile, line: bytes) -> None:
            if line_file.path.name == "snapshots.jsonl" and line:
                self.threads.add(threading.current_thread().name)
                self.entered.set()
                self.release.wait(HANG_GUARD_S)
            write(line_file, line)

        monkeypatch.setattr(LineFile, "write", blocked)


def _lines(path: Path) -> list[dict[str, Any]]:
    """Return the file's whole lines: a line the writer thread is still appending is not one."""
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def test_reset_returns_while_the_snapshot_file_write_is_blocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blocked snapshot file write: resets return; shutdown writes every window in order."""
    blocked = _BlockedSnapshotFile(monkeypatch)
    path = tmp_path / "snapshots.jsonl"
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=TracerProvider(), clock=clock, snapshot_file=path)
    _windows(lt, clock, 1)
    assert blocked.entered.wait(HANG_GUARD_S)  # the writer holds window 1
    returned = _in_thread(lambda: _windows(lt, clock, 19, first=2))
    blocked.release.set()
    assert returned
    lt.shutdown()
    assert blocked.threads == {"looptrace-snapshot-file"}
    assert [line["stats"][PATH]["max"] for line in _lines(path)] == [
        pytest.approx(k / 1e3) for k in range(1, 21)
    ]


def test_a_snapshot_file_far_behind_records_the_dropped_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows past the bound are counted in health() and by a loss line after the kept ones."""
    blocked = _BlockedSnapshotFile(monkeypatch)
    path = tmp_path / "snapshots.jsonl"
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=TracerProvider(), clock=clock, snapshot_file=path)
    _windows(lt, clock, 1)
    assert blocked.entered.wait(HANG_GUARD_S)  # the writer holds window 1
    returned = _in_thread(lambda: _windows(lt, clock, MAX_QUEUED_WINDOWS + 3, first=2))
    blocked.release.set()
    assert returned
    assert lt.health() == looptrace.Health(dropped_windows=3)
    assert wait_until(lambda: len(_lines(path)) == MAX_QUEUED_WINDOWS + 1, HANG_GUARD_S)
    lt.shutdown()
    lines = _lines(path)
    assert [line["stats"][PATH]["max"] for line in lines[:-1]] == [
        pytest.approx(k / 1e3) for k in range(1, MAX_QUEUED_WINDOWS + 2)
    ]
    assert lines[-1] == {"kind": "looptrace.lost", "windows": 3}
