"""The diagnosis of the system figures: an idle GPU and its likely cause, a loader short of CPU."""

from __future__ import annotations

import pytest

from looptrace import Snapshot
from looptrace.testing import Capture
from tests.helpers.system_sources import FakeNvml, FakePsutil

system = pytest.importorskip("looptrace.integrations.system")


def _window(cap: Capture, *, data_s: float, util: list[float] | None, host_busy: float) -> Snapshot:
    """Lap 4 steps (`data_s` in data, 0.1 s in forward), sampling once a second; then reset.

    `util` is the GPU's utilisation at each reading (None: no GPU); `host_busy` the share of
    the host's CPU time busy between readings.
    """
    psutil = FakePsutil()
    sources = [system.HostSource(psutil)]
    nvml = None
    if util is not None:
        nvml = FakeNvml([{"util": util[0], "used": 1e9, "temp": 60.0, "power_mw": 1e5}])
        sources.append(system.NvmlSource(nvml))
    sampler = system.SystemSampler(cap.lt, sources, clock=cap.clock)
    train = cap.lt.timer("train")
    for step in range(4):
        if nvml is not None and util is not None:
            nvml.devices[0]["util"] = util[step]
        psutil.host_busy_s += host_busy
        psutil.host_idle_s += 1 - host_busy
        sampler.sample()
        train.record("data")
        cap.clock.advance(data_s)
        train.record("forward")
        cap.clock.advance(0.1)
        train.record()
    snapshot = cap.lt.reset()
    sampler.stop()
    return snapshot


def _kinds(snapshot: Snapshot) -> dict[str, tuple[str, str | None, object]]:
    return {
        f.kind: (f.severity, f.path, f.evidence.get("cause"))
        for f in snapshot.diagnosis()
        if f.kind in ("gpu_idle", "cpu_starved", "input_bound")
    }


def test_an_idle_gpu_names_the_input_wait_as_its_likely_cause(cap: Capture) -> None:
    """A GPU 20 % busy while half the lap waits for input: gpu_idle critical, cause input_bound."""
    snapshot = _window(cap, data_s=0.1, util=[20.0] * 4, host_busy=0.3)
    assert _kinds(snapshot) == {
        "input_bound": ("critical", "root.train.data", None),
        "gpu_idle": ("critical", "root.train.data", "input_bound"),
    }
    [idle] = [f for f in snapshot.diagnosis() if f.kind == "gpu_idle"]
    assert idle.evidence["utilization"] == pytest.approx(0.2)
    assert (idle.evidence["device"], idle.evidence["samples"]) == ("gpu0", 4)


def test_an_idle_gpu_with_no_timed_cause_says_so(cap: Capture) -> None:
    """A GPU 40 % busy with no input wait: a warning with no cause and no path."""
    snapshot = _window(cap, data_s=0.001, util=[40.0] * 4, host_busy=0.3)
    assert _kinds(snapshot) == {"gpu_idle": ("warning", None, None)}


def test_a_busy_gpu_gives_no_finding(cap: Capture) -> None:
    """A GPU 95 % busy: nothing, even with an input wait."""
    assert "gpu_idle" not in _kinds(_window(cap, data_s=0.1, util=[95.0] * 4, host_busy=0.3))


def test_a_saturated_host_cpu_during_an_input_wait_is_cpu_starved(cap: Capture) -> None:
    """Host CPUs 97 % busy while the lap waits for input: cpu_starved; 50 % busy: nothing."""
    assert _kinds(_window(cap, data_s=0.1, util=None, host_busy=0.97))["cpu_starved"] == (
        "warning",
        "root.train.data",
        None,
    )
    assert "cpu_starved" not in _kinds(_window(cap, data_s=0.1, util=None, host_busy=0.5))


def test_without_gpu_or_with_too_few_readings_the_checks_abstain(cap: Capture) -> None:
    """No GPU figure: gpu_idle abstains (info); a window read fewer than 3 times is not judged."""
    snapshot = _window(cap, data_s=0.1, util=None, host_busy=0.3)
    assert [
        (f.severity, f.evidence.get("abstained"))
        for f in snapshot.diagnosis(min_severity="info")
        if f.kind == "gpu_idle"
    ] == [("info", True)]
    few = _window(cap, data_s=0.1, util=[10.0] * 4, host_busy=0.97)
    assert "gpu_idle" in _kinds(few)
    assert [f.kind for f in few.diagnosis(system_min_samples=5) if f.kind != "input_bound"] == []
