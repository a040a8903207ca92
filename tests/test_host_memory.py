"""Host memory: the process's resident memory creeping, and near the most it may hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from looptrace._stats import memory as memory_module
from looptrace._stats.memory import host_limit
from looptrace.testing import Capture

MIB = 1 << 20
GIB = 1 << 30


def _windows(
    cap: Capture, monkeypatch: pytest.MonkeyPatch, rss: list[int], total: int = 64 * GIB
) -> list[list[tuple[str, str | None, int | None]]]:
    """Close one window per resident size; return each window's (kind, path, rank) findings."""
    monkeypatch.setattr(memory_module, "host_limit", lambda: total)
    train = cap.lt.timer("train")
    found = []
    for size in rss:
        monkeypatch.setattr(memory_module, "host_memory", lambda size=size: (size, size))
        for _ in range(4):
            train.record()
            train.record("forward")
            cap.clock.advance(0.1)
        train.stop()
        snapshot = cap.lt.reset()
        found.append([(f.kind, f.path, f.rank) for f in snapshot.diagnosis()])
    return found


def test_host_resident_memory_creeping_361_mib_is_a_memory_creep(
    cap: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm-up, then 1 GiB growing to 1.35 GiB: memory_creep on this rank, once past 256 MiB."""
    rss = [900 * MIB, 1024 * MIB, 1100 * MIB, 1200 * MIB, 1024 * MIB + 361 * MIB]
    found = _windows(cap, monkeypatch, rss)
    assert found == [[], [], [], [], [("memory_creep", None, 0)]]


def test_a_steady_host_memory_is_quiet(cap: Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resident memory moving 5 % around 1 GiB gives no finding in any window."""
    rss = [1024 * MIB, 1070 * MIB, 1000 * MIB, 1050 * MIB, 1020 * MIB]
    assert _windows(cap, monkeypatch, rss) == [[]] * 5


def test_resident_memory_near_the_limit_is_memory_pressure(
    cap: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """7.5 of 8 GiB resident (94 %) is memory_pressure; the evidence says it is the host's."""
    found = _windows(cap, monkeypatch, [7680 * MIB], total=8 * GIB)
    assert found == [[("memory_pressure", None, 0)]]


def test_the_host_limit_is_the_cgroups_else_the_physical_memory(tmp_path: Path) -> None:
    """A cgroup limit below physical memory is the limit; "max" or no file: physical memory."""
    physical = host_limit(())
    assert physical is not None
    assert physical > 0
    limited = tmp_path / "memory.max"
    limited.write_text("1073741824\n")
    assert host_limit((str(limited),)) == min(GIB, physical)
    unlimited = tmp_path / "unlimited"
    unlimited.write_text("max\n")
    assert host_limit((str(unlimited), str(limited))) == physical
    assert host_limit((str(tmp_path / "absent"), str(limited))) == min(GIB, physical)
