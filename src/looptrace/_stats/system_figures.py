"""System figures of a window: process and host CPU, memory, GPU, sampled by one thread.

`SystemTally` takes the readings of the sampler (`looptrace.integrations.system`) as they
come and hands a window's worth over at its close as a `WindowSystem`: per figure the mean
and the max of the readings, and how many there were.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class FigureStats:
    """The readings of one figure in a window: their mean, their max, how many."""

    mean: float
    max: float
    samples: int

    def to_dict(self) -> dict[str, float | int]:
        """Return the statistics as a plain dict."""
        return {"mean": self.mean, "max": self.max, "samples": self.samples}


@dataclass(frozen=True, slots=True)
class WindowSystem:
    """The system figures of a window, by name (`process_cpu_percent`, `gpu0_power_w`, ...).

    Process CPU is in percent of one core (200 = two cores busy), host CPU in percent of all
    cores; `host_rss_bytes` is this process's resident memory, `host_available_bytes` the
    memory the host could still give; per GPU (NVML) `gpu<i>_utilization_percent`,
    `gpu<i>_memory_used_bytes`, `gpu<i>_temperature_c` and `gpu<i>_power_w`.
    """

    figures: Mapping[str, FigureStats]

    def to_dict(self) -> dict[str, dict[str, float | int]]:
        """Return `{figure: {mean, max, samples}}` as plain data."""
        return {name: stats.to_dict() for name, stats in self.figures.items()}

    def metrics(self) -> dict[str, float]:
        """Return `{figure.mean: value, figure.max: value}` of every figure."""
        flat: dict[str, float] = {}
        for name, stats in self.figures.items():
            flat[f"{name}.mean"] = stats.mean
            flat[f"{name}.max"] = stats.max
        return flat

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, float]]) -> WindowSystem:
        """Return the figures `to_dict()` gave (a snapshot file's `system`)."""
        return cls(
            MappingProxyType(
                {
                    str(name): FigureStats(
                        float(stats["mean"]), float(stats["max"]), int(stats["samples"])
                    )
                    for name, stats in sorted(data.items())
                }
            )
        )


class SystemTally:
    """The readings since the last window's close, per figure: sum, max, count; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._figures: dict[str, list[float]] = {}  # name -> [sum, max, count]

    def add(self, readings: Mapping[str, float]) -> None:
        """Add one reading of each figure given (NaN and infinities are left out)."""
        with self._lock:
            figures = self._figures
            for name, value in readings.items():
                if not math.isfinite(value):
                    continue
                kept = figures.get(name)
                if kept is None:
                    figures[name] = [value, value, 1.0]
                else:
                    kept[0] += value
                    kept[1] = max(kept[1], value)
                    kept[2] += 1

    def take(self) -> WindowSystem | None:
        """Return the window's figures and start the next window empty (None: no reading)."""
        with self._lock:
            figures, self._figures = self._figures, {}
        if not figures:
            return None
        return WindowSystem(
            MappingProxyType(
                {
                    name: FigureStats(total / count, top, int(count))
                    for name, (total, top, count) in sorted(figures.items())
                }
            )
        )
