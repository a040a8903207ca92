"""Device time through the event protocol, driven on the CPU by FakeDeviceClock."""

from __future__ import annotations

import logging

import pytest

from looptrace import ConfigError, TimerError
from looptrace.testing import Capture, FakeDeviceClock, capture

from .helpers.timing import counts, totals


def _gpu(**kw: object) -> tuple[Capture, FakeDeviceClock]:
    device = FakeDeviceClock()
    return capture(device_clock=device, **kw), device


def _step(cap: Capture, device: FakeDeviceClock, *, kernels_s: float = 0.05) -> None:
    """One step: host data loading, then a forward whose kernels run on the device."""
    train = cap.lt.timer("training")
    train.timer("forward", device=True)
    train.record("data")
    cap.clock.advance(0.01)  # host work
    train.record("forward")
    cap.clock.advance(0.001)  # launching kernels takes little host time
    device.advance(kernels_s)  # the kernels themselves run on the device
    train.record()


def test_device_sections_report_device_time_host_sections_host_time() -> None:
    """A device section measures its kernels; host sections in the same loop stay on host."""
    cap, device = _gpu(trace_every=0)
    for _ in range(3):
        _step(cap, device)
    cap.lt.timer("training").stop()
    snap = cap.lt.reset()
    assert totals(snap) == {
        "root.training": pytest.approx(0.033),
        "root.training.data": pytest.approx(0.03),
        "root.training.forward": pytest.approx(0.15),
    }
    assert snap["root.training.forward"].mean == pytest.approx(0.05)


def test_no_wait_in_the_hot_path_and_lazy_resolution() -> None:
    """Steps never wait for the device: done events are read at lap ends, busy ones later."""
    cap, device = _gpu(trace_every=0)
    _step(cap, device)
    log = cap.lt._engine.state().log

    def forward() -> list[object]:
        return [log[i + 1] for i in range(0, len(log), 3) if log[i] == "root.training.forward"]

    assert forward() == [50_000_000]  # read at the lap end: the device was done
    device.busy = True
    for _ in range(5):
        _step(cap, device)
    assert device.waits == 0
    assert forward() == [50_000_000]  # still queued on the device: nothing read
    snap = cap.lt.reset()  # reset waits once, and counts every queued section
    assert device.waits == 1
    assert snap["root.training.forward"].count == 6


def test_reset_splits_a_running_device_section_on_the_device() -> None:
    """reset() cuts a running device section with an event: each window's total gets its part.

    The section is counted once, whole, in the window where it ends.
    """
    cap, device = _gpu(trace_every=0)
    train = cap.lt.timer("training")
    train.timer("forward", device=True)
    train.record("forward")
    device.advance(0.3)
    cap.clock.advance(0.001)
    first = cap.lt.reset()
    device.advance(0.2)
    cap.clock.advance(0.001)
    train.stop()
    second = cap.lt.reset()
    assert first["root.training.forward"].total == pytest.approx(0.3)
    assert second["root.training.forward"].total == pytest.approx(0.2)
    assert (counts(first)["root.training.forward"], counts(second)["root.training.forward"]) == (
        0,
        1,
    )
    assert second["root.training.forward"].max == pytest.approx(0.5)


def test_device_self_time_excludes_device_children() -> None:
    """A device section's self time is its device time minus its device sections'."""
    cap, device = _gpu(trace_every=0)
    train = cap.lt.timer("training")
    forward = train.timer("forward", device=True)
    forward.timer("attention", device=True)
    train.record("forward")
    device.advance(0.1)
    forward.record("attention")
    device.advance(0.3)
    cap.clock.advance(0.001)
    train.stop()
    snap = cap.lt.reset()
    assert snap["root.training.forward"].total == pytest.approx(0.4)
    assert snap["root.training.forward"].self_time == pytest.approx(0.1)
    assert snap["root.training.forward.attention"].self_time == pytest.approx(0.3)


def test_device_spans_made_after_resolution_with_mapped_timestamps() -> None:
    """A traced device section's span is made from its events, under the host lap span."""
    cap, device = _gpu(trace_every=1)
    cap.clock.advance(1.0)
    _step(cap, device)
    cap.lt.timer("training").stop()
    cap.lt.reset()
    tree = {s["name"]: s for s in cap.span_tree()}
    assert tree["forward"]["parent"] == "training"
    forward = next(s for s in cap.finished_spans() if s.name == "forward")
    assert (forward.attributes or {})["looptrace.device"] is True
    assert forward.end_time is not None and forward.start_time is not None
    assert forward.end_time - forward.start_time == 50_000_000
    # The anchor event was recorded when forward started (host 1.01 s, device 0).
    assert tree["forward"]["start"] == pytest.approx(1.01)


def test_exception_in_a_device_section_marks_its_span_and_counts() -> None:
    """An exception inside a device section is an error on its span and in the statistics."""
    cap, device = _gpu(trace_every=1)
    train = cap.lt.timer("training")
    train.timer("step", device=True)
    with pytest.raises(ValueError, match="nan loss"), train.section("step"):
        device.advance(0.02)
        raise ValueError("nan loss")
    train.stop()
    snap = cap.lt.reset()
    assert (snap["root.training.step"].errors, snap["root.training.step"].total) == (1, 0.02)
    step = next(s for s in cap.finished_spans() if s.name == "step")
    assert step.status.status_code.name == "ERROR"


def test_events_are_released_memory_stays_flat() -> None:
    """Over 10,000 steps the events handed out are all given back (bounded memory)."""
    cap, device = _gpu(trace_every=0)
    for _ in range(10_000):
        _step(cap, device, kernels_s=0.001)
    cap.lt.reset()
    assert device.outstanding <= 2  # only those of the still-running step and its cut


def test_device_timer_without_cuda_falls_back_to_host_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With no CUDA device a device timer times on the host, said once in a warning."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("training")
    train.timer("forward", device=True)
    with caplog.at_level(logging.WARNING, logger="looptrace"):
        for _ in range(3):
            train.record("forward")
            cap.clock.advance(0.5)
        train.stop()
    assert cap.lt.reset()["root.training.forward"].total == 1.5
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "device timers use host time" in warnings[0]


def test_synchronize_mode_waits_at_every_boundary() -> None:
    """device_sync=True waits for the device at each timer call and uses host time."""
    device = FakeDeviceClock()
    cap = capture(device_clock=device, device_sync=True, trace_every=0)
    train = cap.lt.timer("training")
    train.timer("forward", device=True)
    train.record("forward")
    cap.clock.advance(0.2)
    train.stop()
    assert device.waits >= 2
    assert cap.lt.reset()["root.training.forward"].total == 0.2


def test_device_flag_is_fixed_at_creation() -> None:
    """Asking for a host timer that already times on the device is an error naming it."""
    cap, _ = _gpu()
    train = cap.lt.timer("training")
    train.timer("forward", device=True)
    assert train.timer("forward").device
    with pytest.raises(TimerError, match=r"'root\.training\.forward' already times on the device"):
        train.timer("forward", device=False)


def test_device_sync_without_cuda_is_a_configuration_error() -> None:
    """device_sync=True with no CUDA device fails at configure() naming the setting."""
    with pytest.raises(ConfigError, match="device_sync=True needs a CUDA device"):
        capture(device_sync=True)
