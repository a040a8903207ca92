"""System and GPU figures per window: one thread samples CPU, memory and NVML GPUs.

```python
from looptrace.integrations.system import sample_system

sampler = sample_system(lt)          # every second; needs psutil (the `system` extra)
...                                  # each window's Snapshot.system: mean and max per figure
sampler.stop()
```

Figures: `process_cpu_percent` (this process, 100 = one core), `host_cpu_percent` (all cores),
`host_rss_bytes` (this process's resident memory), `host_available_bytes`; with
`nvidia-ml-py` and an NVIDIA driver, per device `gpu<i>_utilization_percent`,
`gpu<i>_memory_used_bytes`, `gpu<i>_temperature_c` and `gpu<i>_power_w`. A figure that
cannot be read is left out of the window, never guessed.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any, Protocol

from looptrace._base.errors import ConfigError
from looptrace._core.clock import Clock, MonotonicClock
from looptrace._looptrace import Looptrace
from looptrace._stats.system_figures import SystemTally

__all__ = ["HostSource", "NvmlSource", "SystemSampler", "sample_system"]

MIN_INTERVAL_S = 0.1


class Source(Protocol):
    """Where readings come from: `read(seconds since the last read, None at the first)`."""

    def read(self, elapsed_s: float | None) -> dict[str, float]:
        """Return the figures read now."""


class HostSource:
    """The process's and host's CPU and memory, from psutil."""

    def __init__(self, psutil: Any = None) -> None:
        if psutil is None:
            psutil = importlib.import_module("psutil")  # the system extra

        self._psutil = psutil
        self._process = psutil.Process()
        self._cpu_s: float | None = None
        self._host: tuple[float, float] | None = None  # (busy, all) CPU seconds of the host

    def read(self, elapsed_s: float | None) -> dict[str, float]:
        """Return CPU percentages (from the second read on) and memory sizes."""
        psutil = self._psutil
        times = self._process.cpu_times()
        cpu_s = float(times.user + times.system)
        host = psutil.cpu_times()
        idle = float(host.idle + getattr(host, "iowait", 0.0))
        every = float(sum(host))
        figures = {
            "host_rss_bytes": float(self._process.memory_info().rss),
            "host_available_bytes": float(psutil.virtual_memory().available),
        }
        if elapsed_s and self._cpu_s is not None:
            figures["process_cpu_percent"] = 100.0 * (cpu_s - self._cpu_s) / elapsed_s
        if self._host is not None and every > self._host[1]:
            busy = every - idle
            figures["host_cpu_percent"] = 100.0 * (busy - self._host[0]) / (every - self._host[1])
        self._cpu_s, self._host = cpu_s, (every - idle, every)
        return figures


class NvmlSource:
    """Each NVIDIA GPU's utilisation, memory used, temperature and power, from NVML."""

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            nvml = importlib.import_module("pynvml")  # nvidia-ml-py

        self._nvml = nvml
        nvml.nvmlInit()
        self._handles = [
            nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())
        ]

    def read(self, elapsed_s: float | None) -> dict[str, float]:
        """Return the figures of every device (a figure a device refuses is left out)."""
        nvml = self._nvml
        figures: dict[str, float] = {}
        for index, handle in enumerate(self._handles):
            for name, read in _NVML_READS.items():
                try:
                    figures[f"gpu{index}_{name}"] = float(read(nvml, handle))
                except Exception:  # a figure this device does not give
                    continue
        return figures

    def close(self) -> None:
        """Release NVML."""
        self._nvml.nvmlShutdown()


# Each GPU figure, read from NVML for one device handle.
_NVML_READS: dict[str, Callable[[Any, Any], float]] = {
    "utilization_percent": lambda nvml, h: nvml.nvmlDeviceGetUtilizationRates(h).gpu,
    "memory_used_bytes": lambda nvml, h: nvml.nvmlDeviceGetMemoryInfo(h).used,
    "temperature_c": lambda nvml, h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
    "power_w": lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,  # milliwatts
}


class SystemSampler:
    """Reads every source each `interval_s` on one thread; windows take the readings' stats."""

    def __init__(
        self,
        lt: Looptrace,
        sources: list[Any],
        *,
        interval_s: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(interval_s, (int, float)) or not interval_s >= MIN_INTERVAL_S:
            raise ConfigError(
                f"sample_system(): interval_s must be a number >= {MIN_INTERVAL_S}: {interval_s!r}"
            )
        self.lt = lt
        self.sources = sources
        self.interval_s = float(interval_s)
        self.tally = SystemTally()
        self._now = (clock or MonotonicClock()).monotonic_ns
        self._last: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        lt.system = self.tally.take

    def sample(self) -> None:
        """Read every source once now and add the readings to the window."""
        now = self._now()
        elapsed = None if self._last is None else (now - self._last) / 1e9
        self._last = now
        for source in self.sources:
            try:
                self.tally.add(source.read(elapsed))
            except Exception:
                self.lt.internal_error(f"reading {type(source).__name__}")

    def start(self) -> SystemSampler:
        """Start the sampling thread (a daemon); return self."""
        if self._thread is None:
            self.sample()
            self._thread = threading.Thread(target=self._run, name="looptrace-system", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> None:
        """Stop sampling; windows closed from now on carry no system figures."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lt.system == self.tally.take:
            self.lt.system = None
        for source in self.sources:
            close = getattr(source, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    self.lt.internal_error(f"closing {type(source).__name__}")


def sample_system(
    lt: Looptrace, *, interval_s: float = 1.0, gpu: bool | None = None
) -> SystemSampler:
    """Start sampling the system figures every `interval_s` seconds into `lt`'s windows.

    `gpu=None` reads NVIDIA GPUs where `nvidia-ml-py` and a driver are at hand; `True`
    requires them; `False` skips them.

    Raises:
        ConfigError: psutil is missing, `interval_s` is below 0.1, or `gpu=True` and NVML
            cannot start.

    """
    try:
        sources: list[Any] = [HostSource()]
    except ImportError:
        raise ConfigError("sample_system() needs psutil: pip install 'looptrace[system]'") from None
    if gpu is not False:
        try:
            sources.append(NvmlSource())
        except Exception as error:
            if gpu:
                raise ConfigError(f"sample_system(gpu=True): NVML did not start: {error}") from None
    return SystemSampler(lt, sources, interval_s=interval_s).start()
