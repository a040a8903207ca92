"""Memory per window: host resident memory always, CUDA allocator figures from torch's stats."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from looptrace import ConfigError
from looptrace.testing import capture

torch = pytest.importorskip("torch")

GIB = 1 << 30


class Allocator:
    """A stand-in for torch's CUDA caching allocator: `torch.cuda.memory_stats()` and its resets."""

    def __init__(self) -> None:
        self.allocated = self.peak_allocated = 0
        self.reserved = self.peak_reserved = 0
        self.retries = self.ooms = 0
        self.resets = 0
        self.reads = 0

    def use(self, allocated: int, reserved: int) -> None:
        """Hold `allocated` bytes in `reserved` bytes now."""
        self.allocated, self.reserved = allocated, reserved
        self.peak_allocated = max(self.peak_allocated, allocated)
        self.peak_reserved = max(self.peak_reserved, reserved)

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        """Return the figures looptrace reads, as torch names them."""
        self.reads += 1
        return {
            "allocated_bytes.all.current": self.allocated,
            "allocated_bytes.all.peak": self.peak_allocated,
            "reserved_bytes.all.current": self.reserved,
            "reserved_bytes.all.peak": self.peak_reserved,
            "num_alloc_retries": self.retries,
            "num_ooms": self.ooms,
        }

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        """Start the peaks from what is held now."""
        self.resets += 1
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> Allocator:
    """torch.cuda initialised, its memory statistics answered by an `Allocator`."""
    stand_in = Allocator()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_stats", stand_in.memory_stats)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", stand_in.reset_peak_memory_stats)
    return stand_in


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
