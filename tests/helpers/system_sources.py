"""Stand-ins for psutil's and pynvml's functions, with the values a test scripts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class FakePsutil:
    """psutil's `Process`, `cpu_times` and `virtual_memory`, returning the scripted values."""

    def __init__(self) -> None:
        self.process_cpu_s = 0.0  # user + system seconds of the process
        self.host_busy_s, self.host_idle_s = 0.0, 0.0
        self.rss, self.available = 0, 0

    def Process(self) -> Any:  # noqa: N802 - psutil's name
        """Return the current process."""
        psutil = self

        class _Process:
            def cpu_times(self) -> Any:
                return SimpleNamespace(user=psutil.process_cpu_s, system=0.0)

            def memory_info(self) -> Any:
                return SimpleNamespace(rss=psutil.rss)

        return _Process()

    def cpu_times(self) -> Any:
        """Return the host's CPU times (a tuple with named fields, as psutil's)."""
        return _Times(self.host_busy_s, self.host_idle_s, 0.0)

    def virtual_memory(self) -> Any:
        """Return the host's memory."""
        return SimpleNamespace(available=self.available)


class _Times(tuple):  # type: ignore[type-arg]
    """A `(user, idle, iowait)` tuple with those names, as `psutil.cpu_times()` gives."""

    def __new__(cls, user: float, idle: float, iowait: float) -> _Times:
        return super().__new__(cls, (user, idle, iowait))

    @property
    def idle(self) -> float:
        """The idle seconds."""
        return float(self[1])

    @property
    def iowait(self) -> float:
        """The seconds waiting for I/O."""
        return float(self[2])


class NVMLError(Exception):
    """What pynvml raises for a figure a device does not support."""


class FakeNvml:
    """pynvml's functions over `devices` (dicts of util, used, temp, power_mw; None: refused)."""

    NVML_TEMPERATURE_GPU = 0

    def __init__(self, devices: list[dict[str, float | None]]) -> None:
        self.devices = devices
        self.started = self.stopped = False

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        """Start NVML."""
        self.started = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        """Stop NVML."""
        self.stopped = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        """Return the number of devices."""
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        """Return the handle of device `index` (its index)."""
        return index

    def _get(self, handle: int, name: str) -> float:
        value = self.devices[handle][name]
        if value is None:
            raise NVMLError("Not Supported")
        return value

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:  # noqa: N802
        """Return the utilisation (`.gpu`, percent)."""
        return SimpleNamespace(gpu=self._get(handle, "util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:  # noqa: N802
        """Return the memory (`.used`, bytes)."""
        return SimpleNamespace(used=self._get(handle, "used"), total=0, free=0)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> float:  # noqa: N802
        """Return the temperature (°C)."""
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._get(handle, "temp")

    def nvmlDeviceGetPowerUsage(self, handle: int) -> float:  # noqa: N802
        """Return the power (milliwatts)."""
        return self._get(handle, "power_mw")
