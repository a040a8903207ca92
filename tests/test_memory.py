"""Memory per window: host resident memory always, CUDA allocator figures from torch's stats."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from looptrace import ConfigError
from looptrace.testing import Capture, capture
from tests.helpers.allocator import GIB, Allocator

torch = pytest.importorskip("torch")


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> Allocator:
    """torch.cuda initialised, its memory statistics answered by an `Allocator`."""
    return Allocator().install(monkeypatch.setattr, torch.cuda)


def test_host_memory_in_every_window() -> None:
    """Every lt.reset() window has the process's resident memory and its peak, in bytes."""
    cap = capture(trace_every=0)
    try:
        memory = cap.lt.reset().memory
    finally:
        cap.lt.shutdown()
    assert memory is not None
    if sys.platform.startswith("linux"):
        assert memory.host_rss is not None
        assert memory.host_peak_rss is not None
        assert 1 << 20 < memory.host_rss <= memory.host_peak_rss
    assert memory.device_peak_allocated is None  # CUDA not initialised here


def test_device_peaks_retries_and_ooms_per_window(allocator: Allocator) -> None:
    """Each window has its own peaks (reset at its close), and the retries and OOMs in it."""
    cap = capture(trace_every=0, device_memory=True)
    try:
        allocator.use(3 * GIB, 4 * GIB)
        allocator.use(1 * GIB, 4 * GIB)
        allocator.retries, allocator.ooms = 2, 1
        first = cap.lt.reset().memory
        allocator.use(2 * GIB, 5 * GIB)
        allocator.use(1 * GIB, 5 * GIB)
        allocator.retries = 5
        second = cap.lt.reset().memory
        third = cap.lt.reset().memory
    finally:
        cap.lt.shutdown()
    assert first is not None and second is not None and third is not None
    figures = [
        (m.device_peak_allocated, m.device_peak_reserved, m.device_alloc_retries, m.device_ooms)
        for m in (first, second, third)
    ]
    assert figures == [
        (3 * GIB, 4 * GIB, 2, 1),
        (2 * GIB, 5 * GIB, 3, 0),
        (1 * GIB, 5 * GIB, 0, 0),
    ]


def test_device_memory_false_reads_and_resets_nothing(allocator: Allocator) -> None:
    """configure(device_memory=False) leaves torch's statistics and their peak alone."""
    cap = capture(trace_every=0, device_memory=False)
    try:
        allocator.use(GIB, GIB)
        memory = cap.lt.reset().memory
    finally:
        cap.lt.shutdown()
    assert memory is not None
    assert (memory.device_peak_allocated, memory.device_alloc_retries) == (None, None)
    assert (allocator.reads, allocator.resets) == (0, 0)


def test_peak_reset_has_one_owner_per_process(allocator: Allocator) -> None:
    """A second looptrace does not reset the peak another owns; after its shutdown one may."""
    owner = capture(trace_every=0, device_memory=True)
    other = capture(trace_every=0)
    try:
        allocator.use(2 * GIB, 2 * GIB)
        allocator.retries = 1
        seen = other.lt.reset().memory
        assert allocator.resets == 0
        assert seen is not None
        assert (seen.device_peak_allocated, seen.device_alloc_retries) == (None, 1)
        owner.lt.reset()
        assert allocator.resets == 1
    finally:
        owner.lt.shutdown()
        other.lt.shutdown()
    later = capture(trace_every=0)
    before = allocator.resets
    try:
        memory = later.lt.reset().memory
        assert allocator.resets == before + 1
    finally:
        later.lt.shutdown()
    assert memory is not None
    assert memory.device_peak_allocated == 2 * GIB


def test_timer_reset_reads_no_memory(allocator: Allocator) -> None:
    """A timer's own window carries no memory: the peak is the process's, reset by lt.reset()."""
    cap = capture(trace_every=0, device_memory=True)
    try:
        train = cap.lt.timer("train")
        train.record()
        assert train.reset().memory is None
        assert allocator.resets == 0
    finally:
        cap.lt.shutdown()


def test_memory_in_snapshot_file_and_metrics(allocator: Allocator, tmp_path: Path) -> None:
    """The snapshot file has a memory object; as_metrics(memory=True) has its figures."""
    path = tmp_path / "s.jsonl"
    cap = capture(trace_every=0, device_memory=True, snapshot_file=path)
    try:
        cap.lt.timer("train").record()
        allocator.use(GIB, 2 * GIB)
        cap.clock.advance(1.0)
        snap = cap.lt.reset()
        flat = snap.as_metrics(memory=True)
        plain = snap.as_metrics()
    finally:
        cap.lt.shutdown()
    assert flat["timing.memory.device_peak_allocated_bytes"] == GIB
    assert flat["timing.memory.device_peak_reserved_bytes"] == 2 * GIB
    assert flat["timing.memory.device_ooms"] == 0
    assert not any(key.startswith("timing.memory.") for key in plain)
    line = json.loads(path.read_text().splitlines()[0])
    assert line["memory"]["device_peak_allocated"] == GIB
    assert line["memory"]["device_peak_reserved"] == 2 * GIB


def test_device_memory_setting_is_checked() -> None:
    """device_memory must be True, False or None: anything else is a ConfigError naming it."""
    with pytest.raises(ConfigError, match="device_memory must be True, False or None, got 'on'"):
        capture(device_memory="on")


def test_the_device_total_is_read_at_the_close(allocator: Allocator) -> None:
    """Each window has the device's total memory from its properties; None where unreadable."""
    cap = capture(trace_every=0, device_memory=True)
    try:
        known = cap.lt.reset().memory
        allocator.total = None
        unknown = cap.lt.reset().memory
    finally:
        cap.lt.shutdown()
    assert known is not None and unknown is not None
    assert (known.device_total, unknown.device_total) == (80 * GIB, None)
    assert unknown.device_alloc_retries == 0  # the other figures are kept


def _lap_memory(cap: Capture) -> list[tuple[str, int, dict[str, Any]]]:
    """Return (name, step, memory attributes) of each finished span, in the order they ended."""
    return [
        (
            span.name,
            dict(span.attributes or {})["looptrace.step"],
            {k: v for k, v in (span.attributes or {}).items() if k.startswith("looptrace.memory.")},
        )
        for span in cap.finished_spans()
    ]


def test_traced_laps_carry_the_memory_peaks_so_far_in_their_window(allocator: Allocator) -> None:
    """A traced lap's span has the host peak RSS and the device peak so far in its window."""
    cap = capture(trace_every=1, device_memory=True)
    try:
        train = cap.lt.timer("train")
        train.record("forward")
        allocator.use(3 * GIB, 4 * GIB)
        allocator.use(1 * GIB, 4 * GIB)
        train.record()  # lap 0 ends: 3 GiB at most so far
        allocator.use(2 * GIB, 4 * GIB)
        train.stop()  # lap 1: still 3 GiB, the window's peak
        cap.lt.reset()  # the next window's peak starts from the 2 GiB held now
        allocator.use(1 * GIB, 4 * GIB)
        train.record()
        train.stop()  # lap 2: 2 GiB
    finally:
        cap.lt.shutdown()
    laps = [(name, step, memory) for name, step, memory in _lap_memory(cap) if name == "train"]
    device = "looptrace.memory.device_peak_allocated"
    assert [(step, memory[device]) for _, step, memory in laps] == [
        (0, 3 * GIB),
        (1, 3 * GIB),
        (2, 2 * GIB),
    ]
    if sys.platform.startswith("linux"):
        peaks = [memory["looptrace.memory.host_peak_rss"] for _, _, memory in laps]
        assert 1 << 20 < peaks[0] <= peaks[1] <= peaks[2]
    assert [memory for name, _, memory in _lap_memory(cap) if name != "train"] == [{}]  # forward


def test_untraced_laps_read_no_memory(allocator: Allocator) -> None:
    """Laps that are not traced read nothing: the allocator is asked only at traced laps' ends."""
    cap = capture(trace_every=4, trace_first=0, device_memory=True, slow_lap_factor=None)
    try:
        train = cap.lt.timer("train")
        for _ in range(8):
            train.record()
        train.stop()  # laps 0 and 4 traced
        assert allocator.reads == 2
    finally:
        cap.lt.shutdown()
    assert [step for name, step, memory in _lap_memory(cap) if memory] == [0, 4]


def test_without_cuda_or_device_memory_laps_carry_the_host_peak_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No initialised CUDA, or device_memory=False: the host peak alone, the device untouched."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    plain = capture(trace_every=1)
    try:
        plain.lt.timer("train").record()
        plain.lt.timer("train").stop()
    finally:
        plain.lt.shutdown()
    stand_in = Allocator().install(monkeypatch.setattr, torch.cuda)
    off = capture(trace_every=1, device_memory=False)
    try:
        off.lt.timer("train").record()
        off.lt.timer("train").stop()
    finally:
        off.lt.shutdown()
    assert stand_in.reads == 0
    for cap in (plain, off):
        (memory,) = [memory for _, _, memory in _lap_memory(cap)]
        if sys.platform.startswith("linux"):
            assert list(memory) == ["looptrace.memory.host_peak_rss"]


def test_a_device_that_fails_leaves_the_host_peak(allocator: Allocator) -> None:
    """An allocator that raises while a lap ends: the lap keeps its span and its host figure."""
    cap = capture(trace_every=1, device_memory=True)

    def broken(device: object = None) -> dict[str, int]:
        raise RuntimeError("CUDA error: device lost")

    try:
        torch.cuda.memory_stats = broken  # restored by the fixture's monkeypatch
        cap.lt.timer("train").record()
        cap.lt.timer("train").stop()
    finally:
        cap.lt.shutdown()
    ((name, _, memory),) = _lap_memory(cap)
    assert name == "train"
    assert "looptrace.memory.device_peak_allocated" not in memory
    assert cap.lt.health().internal_errors == 0


def test_a_slow_lap_carries_the_memory_when_it_ended(allocator: Allocator) -> None:
    """A slow untraced lap exported later has the memory peaks read when it ended."""
    cap = capture(trace_every=0, device_memory=True)
    try:
        train = cap.lt.timer("train")
        for _ in range(12):
            train.record()
            cap.clock.advance(0.1)
        allocator.use(5 * GIB, 6 * GIB)
        cap.clock.advance(2.0)  # lap 11 takes 2.1 s against a median of 0.1 s
        train.record()
        allocator.use(7 * GIB, 8 * GIB)  # after the slow lap: not its peak
        train.stop()
    finally:
        cap.lt.shutdown()
    (slow,) = [s for s in cap.finished_spans() if "looptrace.slow_lap" in (s.attributes or {})]
    attributes = dict(slow.attributes or {})
    assert attributes["looptrace.step"] == 11
    assert attributes["looptrace.memory.device_peak_allocated"] == 5 * GIB
