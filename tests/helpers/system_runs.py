"""Snapshot files with system figures: looptrace on a fake clock, psutil and NVML stand-ins.

`record_system_run` writes what a training loop with `sample_system` writes: the real
`SystemSampler` reads `FakePsutil` (and `FakeNvml`) once per lap of a timer, and each window
closed by `reset()` carries the mean, max and samples of its readings in its `system`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looptrace import RankInfo
from looptrace.integrations.system import HostSource, NvmlSource, SystemSampler
from looptrace.testing import capture

from .system_sources import FakeNvml, FakePsutil

CORES = 4  # the stand-in host's cores: its CPU seconds per second


@dataclass(frozen=True)
class Reading:
    """One sample: CPU over the second before it, memory and GPUs at it."""

    process_cpu: float  # percent of one core
    host_cpu: float  # percent of all cores
    rss: int = 1 << 30
    available: int = 8 << 30
    gpus: tuple[float, ...] = ()  # utilisation percent per device (memory: 1 GiB each)


class FixedSource:
    """A source that reads the same figures every time (names a sampler would not make)."""

    def __init__(self, figures: Mapping[str, float]) -> None:
        self.figures = dict(figures)

    def read(self, elapsed_s: float | None) -> dict[str, float]:
        """Return the figures."""
        return dict(self.figures)


def record_system_run(
    directory: Path,
    windows: Sequence[Sequence[Reading]],
    *,
    rank: int = 0,
    world_size: int = 1,
    extra: Mapping[str, float] | None = None,
) -> Path:
    """Write a lap of 1 s per reading of each window, sampled at its end; return the file.

    A first sample before the loop primes the CPU counters (it gives memory and GPU figures
    only, those of the first reading, counted in the first window). `extra`: figures of a
    `FixedSource` read at every sample too. The file is `snapshots.jsonl` (per rank:
    `snapshots.rank<N>.jsonl` when `world_size` > 1).
    """
    cap = capture(
        rank=RankInfo(rank=rank, world_size=world_size),
        snapshot_file=str(directory / "snapshots.jsonl"),
    )
    psutil = FakePsutil()
    first = windows[0][0]
    nvml = FakeNvml([{"util": util, "used": float(1 << 30)} for util in first.gpus])
    for device in nvml.devices:
        device.update(temp=None, power_mw=None)  # figures this device does not give
    sources: list[Any] = [HostSource(psutil)]
    if first.gpus:
        sources.append(NvmlSource(nvml))
    if extra:
        sources.append(FixedSource(extra))
    sampler = SystemSampler(cap.lt, sources, clock=cap.clock)
    _apply(psutil, nvml, first, seconds=0.0)
    sampler.sample()
    train = cap.lt.timer("train")
    for index, readings in enumerate(windows):
        for number, reading in enumerate(readings):
            train.record("compute")
            cap.clock.advance(1.0)
            _apply(psutil, nvml, reading, seconds=1.0)
            sampler.sample()
            if index < len(windows) - 1 or number < len(readings) - 1:
                train.record()
            else:
                train.stop()
        cap.lt.reset()
    sampler.stop()
    cap.lt.shutdown()
    return directory / ("snapshots.jsonl" if world_size == 1 else f"snapshots.rank{rank}.jsonl")


def _apply(psutil: FakePsutil, nvml: FakeNvml, reading: Reading, *, seconds: float) -> None:
    """Set the stand-ins so that the next sample, `seconds` after the last, reads `reading`."""
    psutil.process_cpu_s += seconds * reading.process_cpu / 100
    busy = seconds * CORES * reading.host_cpu / 100
    psutil.host_busy_s += busy
    psutil.host_idle_s += seconds * CORES - busy
    psutil.rss, psutil.available = reading.rss, reading.available
    for device, util in zip(nvml.devices, reading.gpus, strict=True):
        device["util"] = util


def system_of(file: Path) -> list[dict[str, Any]]:
    """Return the `system` object of each snapshot line of `file` (None where it has none)."""
    return [json.loads(line).get("system") for line in file.read_text().splitlines()]


def system_block(printed: str) -> list[str]:
    """Return the lines of the system block of a summary's output (from `system, ` to a blank)."""
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("system, "))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]
