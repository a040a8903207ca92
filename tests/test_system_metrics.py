"""System figures per window: the sampler's readings on a fake clock, psutil and NVML stand-ins."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from looptrace import ConfigError
from looptrace.testing import Capture, capture
from tests.helpers.system_sources import FakeNvml, FakePsutil

system = pytest.importorskip("looptrace.integrations.system")


def test_each_window_holds_the_mean_and_max_of_its_readings(cap: Capture) -> None:
    """Readings at 0, 1, 2 s: process CPU from the clock, host CPU from its times; then reset."""
    psutil = FakePsutil()
    sampler = system.SystemSampler(cap.lt, [system.HostSource(psutil)], clock=cap.clock)
    readings = [  # process CPU s, host busy s, host idle s, rss, available
        (0.0, 0.0, 0.0, 100, 1000),
        (0.5, 1.0, 3.0, 300, 800),  # 0.5 s of CPU in 1 s: 50 %; host 1 busy of 4: 25 %
        (2.0, 4.0, 4.0, 200, 600),  # 1.5 s in 1 s: 150 %; host 3 busy of 4: 75 %
    ]
    for cpu, busy, idle, rss, available in readings:
        psutil.process_cpu_s, psutil.host_busy_s, psutil.host_idle_s = cpu, busy, idle
        psutil.rss, psutil.available = rss, available
        sampler.sample()
        cap.clock.advance(1.0)
    snapshot = cap.lt.reset()
    assert snapshot.system is not None
    assert snapshot.system.to_dict() == {
        "host_available_bytes": {"mean": 800.0, "max": 1000.0, "samples": 3},
        "host_cpu_percent": {"mean": 50.0, "max": 75.0, "samples": 2},
        "host_rss_bytes": {"mean": 200.0, "max": 300.0, "samples": 3},
        "process_cpu_percent": {"mean": 100.0, "max": 150.0, "samples": 2},
    }
    assert {k: v for k, v in snapshot.as_metrics(system=True).items() if ".system." in k} == {
        "timing.system.host_available_bytes.mean": 800.0,
        "timing.system.host_available_bytes.max": 1000.0,
        "timing.system.host_cpu_percent.mean": 50.0,
        "timing.system.host_cpu_percent.max": 75.0,
        "timing.system.host_rss_bytes.mean": 200.0,
        "timing.system.host_rss_bytes.max": 300.0,
        "timing.system.process_cpu_percent.mean": 100.0,
        "timing.system.process_cpu_percent.max": 150.0,
    }
    assert cap.lt.reset().system is None  # no reading since: no figures
    sampler.stop()
    assert cap.lt.system is None


def test_nvml_figures_per_device_leave_out_what_a_device_refuses(cap: Capture) -> None:
    """Two devices through NVML's functions; device 1 gives no power: that figure is absent."""
    nvml = FakeNvml(
        [
            {"util": 90.0, "used": 4e9, "temp": 70.0, "power_mw": 250_000.0},
            {"util": 10.0, "used": 1e9, "temp": 40.0, "power_mw": None},
        ]
    )
    source = system.NvmlSource(nvml)
    sampler = system.SystemSampler(cap.lt, [source], clock=cap.clock)
    sampler.sample()
    nvml.devices[0]["util"] = 70.0
    sampler.sample()
    figures = cap.lt.reset().system
    assert figures is not None
    assert {name: (f.mean, f.max) for name, f in figures.figures.items()} == {
        "gpu0_utilization_percent": (80.0, 90.0),
        "gpu0_memory_used_bytes": (4e9, 4e9),
        "gpu0_temperature_c": (70.0, 70.0),
        "gpu0_power_w": (250.0, 250.0),
        "gpu1_utilization_percent": (10.0, 10.0),
        "gpu1_memory_used_bytes": (1e9, 1e9),
        "gpu1_temperature_c": (40.0, 40.0),
    }
    sampler.stop()
    assert nvml.started and nvml.stopped


def test_the_snapshot_file_holds_the_system_figures(tmp_path: Path) -> None:
    """A window's `system` is written to the snapshot file as figure -> mean, max, samples."""
    file = tmp_path / "snapshots.jsonl"
    cap = capture(snapshot_file=str(file))
    psutil = FakePsutil()
    psutil.rss, psutil.available = 5, 7
    sampler = system.SystemSampler(cap.lt, [system.HostSource(psutil)], clock=cap.clock)
    sampler.sample()
    timer = cap.lt.timer("train")
    timer.record()
    cap.clock.advance(1.0)
    timer.stop()
    cap.lt.reset()
    sampler.stop()
    cap.lt.shutdown()
    first = json.loads(file.read_text().splitlines()[0])
    assert first["system"] == {
        "host_available_bytes": {"mean": 7.0, "max": 7.0, "samples": 1},
        "host_rss_bytes": {"mean": 5.0, "max": 5.0, "samples": 1},
    }


def test_the_thread_samples_real_psutil_until_stopped(cap: Capture) -> None:
    """`sample_system(interval_s=0.1)` on this host: CPU and memory figures arrive, then stop."""
    pytest.importorskip("psutil", reason="the system extra is not installed")
    sampler = system.sample_system(cap.lt, interval_s=0.1, gpu=False)
    deadline = time.monotonic() + 30
    while "process_cpu_percent" not in sampler.tally._figures and time.monotonic() < deadline:
        time.sleep(0.01)
    figures = cap.lt.reset().system
    sampler.stop()
    assert figures is not None
    assert {"process_cpu_percent", "host_cpu_percent", "host_rss_bytes"} <= set(figures.figures)
    assert figures.figures["host_rss_bytes"].mean > 0
    assert cap.lt.health().internal_errors == 0


def test_a_bad_interval_is_refused(cap: Capture) -> None:
    """`interval_s` below 0.1 raises a ConfigError naming it."""
    with pytest.raises(ConfigError, match="interval_s"):
        system.SystemSampler(cap.lt, [], interval_s=0.01)


def test_a_missing_gpu_is_refused(cap: Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gpu=True` where NVML cannot start (no `pynvml`) raises a ConfigError naming NVML."""
    pytest.importorskip("psutil", reason="the system extra is not installed")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(ConfigError, match="NVML"):
        system.sample_system(cap.lt, gpu=True)


def test_a_missing_psutil_is_refused(cap: Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sample_system()` without psutil raises a ConfigError naming the system extra."""
    monkeypatch.setitem(sys.modules, "psutil", None)
    with pytest.raises(ConfigError, match=r"psutil.*looptrace\[system\]"):
        system.sample_system(cap.lt, gpu=False)


def _sampled(cap: Capture) -> object:
    """Sample two readings of a stand-in host into a window with a section; return it."""
    psutil = FakePsutil()
    sampler = system.SystemSampler(cap.lt, [system.HostSource(psutil)], clock=cap.clock)
    psutil.rss, psutil.available = 100, 1000
    sampler.sample()
    psutil.rss = 300
    sampler.sample()
    with cap.lt.timer("train").section("data"):
        cap.clock.advance(0.01)
    snapshot = cap.lt.reset()
    sampler.stop()
    return snapshot


def test_the_metric_readers_get_the_system_gauge(cap: Capture) -> None:
    """`looptrace.system.window`: a point per figure and statistic of the latest window."""
    _sampled(cap)
    data = cap.metrics.get_metrics_data()
    assert data is not None
    gauges = [
        metric
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "looptrace.system.window"
    ]
    assert len(gauges) == 1
    assert {
        point.attributes["looptrace.system"]: point.value for point in gauges[0].data.data_points
    } == {
        "host_available_bytes.max": 1000.0,
        "host_available_bytes.mean": 1000.0,
        "host_rss_bytes.max": 300.0,
        "host_rss_bytes.mean": 200.0,
    }


def test_the_prometheus_endpoint_serves_the_system_gauge() -> None:
    """`looptrace_system_window{looptrace_system="host_rss_bytes.max"}` and the rest, by rank."""
    pytest.importorskip("prometheus_client", reason="the prometheus extra is missing")
    from prometheus_client.parser import text_string_to_metric_families

    from looptrace import RankInfo
    from tests.helpers.otlp_server import LOCALHOST, free_port

    port = free_port()
    cap = capture(prometheus=port, rank=RankInfo(rank=1, world_size=2))
    try:
        _sampled(cap)
        url = f"http://{LOCALHOST}:{port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    finally:
        cap.lt.shutdown()
    served = {
        (sample.labels["looptrace_system"], sample.labels["looptrace_rank"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "looptrace_system_window"
        for sample in family.samples
    }
    assert served == {
        ("host_available_bytes.max", "1"): 1000.0,
        ("host_available_bytes.mean", "1"): 1000.0,
        ("host_rss_bytes.max", "1"): 300.0,
        ("host_rss_bytes.mean", "1"): 200.0,
    }
