"""Memory per window: the host process's resident memory, and the CUDA allocator's peaks."""

from __future__ import annotations

import math
import os
import sys
import weakref
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from looptrace._base.attributes import DEVICE_PEAK_ALLOCATED, HOST_PEAK_RSS


@dataclass(frozen=True, slots=True)
class WindowMemory:
    """The process's memory when a window closed; every size is in bytes.

    `host_rss` is the process's resident memory at the close and `host_peak_rss` the most it
    has held since it started (None where the platform does not say). The `device_` figures
    come from `torch.cuda.memory_stats()` of the current device, when torch has initialised
    CUDA in this process (else None): `device_peak_allocated` and `device_peak_reserved` are
    the most the allocator held during the window (None when looptrace does not own the peak
    reset: see `configure(device_memory=...)`), `device_alloc_retries` and `device_ooms` the
    allocator's retries after freeing its cache and its out-of-memory errors in the window.
    `device_total` is the current device's total memory (its properties, read at the close;
    None where it cannot be read). `host_total` is the most resident memory the process may
    hold: its cgroup's limit where one is set, else the host's physical memory (None where
    neither can be read).
    """

    host_rss: int | None
    host_peak_rss: int | None
    device_peak_allocated: int | None = None
    device_peak_reserved: int | None = None
    device_alloc_retries: int | None = None
    device_ooms: int | None = None
    device_total: int | None = None
    host_total: int | None = None

    def to_dict(self) -> dict[str, int | None]:
        """Return the figures as a plain dict (None where not measured)."""
        return asdict(self)

    def metrics(self) -> dict[str, float]:
        """Return the measured figures as `{name: value}`, sizes named `..._bytes`."""
        flat: dict[str, float] = {}
        for key, value in self.to_dict().items():
            if value is not None and not math.isnan(value):
                name = key if key in _COUNTS else f"{key}_bytes"
                flat[name] = float(value)
        return flat


_COUNTS = frozenset({"device_alloc_retries", "device_ooms"})  # figures that are not sizes

# The reader that owns the CUDA peak reset (`MemoryReader.owns_peak`): one per process, held
# weakly, so a reader dropped without `shutdown()` leaves it to the next.
_peak_owner: list[weakref.ref[MemoryReader]] = []


class MemoryReader:
    """Reads the process's memory at each window's close, with no device synchronisation.

    Resetting the CUDA allocator's peak is process-wide: with `device_memory=None` (the
    default) a reader resets it only when no other reader in the process does (the first
    `configure()` that asks owns it until its `shutdown()`); `True` takes it even so; `False`
    reads no device figure at all. A reader that does not own the reset reports retries and
    OOMs, not peaks. The first window's retries and OOMs are those since the process began.
    """

    def __init__(self, device_memory: bool | None = None) -> None:
        self._device = device_memory is not False
        self.owns_peak = False
        if self._device and (device_memory is True or _owner() is None):
            _peak_owner[:] = [weakref.ref(self)]
            self.owns_peak = True
        self._retries = self._ooms = 0  # the allocator's counts at the previous close

    def release(self) -> None:
        """Give up the CUDA peak reset (at `shutdown()`), for a later reader to own."""
        if _owner() is self:
            _peak_owner.clear()
        self.owns_peak = False

    def read(self) -> WindowMemory:
        """Return the memory of the window closing now; start the next window's peak.

        A reader whose ownership another took (`device_memory=True`) stops resetting.
        """
        if self.owns_peak and _owner() is not self:
            self.owns_peak = False
        rss, peak = host_memory()
        host = host_limit()
        device = self._cuda() if self._device else None
        if device is None:
            return WindowMemory(rss, peak, host_total=host)
        stats, reset, total = device
        try:
            current = stats()
            retries = int(current.get("num_alloc_retries", 0))
            ooms = int(current.get("num_ooms", 0))
            allocated = reserved = None
            if self.owns_peak:
                allocated = int(current.get("allocated_bytes.all.peak", 0))
                reserved = int(current.get("reserved_bytes.all.peak", 0))
                reset()
        except Exception:  # a device that cannot answer: host figures only
            return WindowMemory(rss, peak, host_total=host)
        window = WindowMemory(
            rss,
            peak,
            device_peak_allocated=allocated,
            device_peak_reserved=reserved,
            device_alloc_retries=max(retries - self._retries, 0),
            device_ooms=max(ooms - self._ooms, 0),
            device_total=_total(total),
            host_total=host,
        )
        self._retries, self._ooms = retries, ooms
        return window

    def lap(self) -> dict[str, int]:
        """Return the memory attributes of a traced lap ending now (bytes), for its span.

        The process's peak resident memory so far, always where the platform says; the CUDA
        allocator's peak allocated so far in the window, where this reader reads and owns the
        peak (so that it is the window's) and torch has initialised CUDA. No device
        synchronisation; a device that cannot answer gives the host figure alone.
        """
        figures: dict[str, int] = {}
        peak = host_peak()
        if peak is not None:
            figures[HOST_PEAK_RSS] = peak
        if self.owns_peak and _owner() is self:
            device = self._cuda()
            if device is not None:
                try:
                    allocated = device[0]().get("allocated_bytes.all.peak")
                except Exception:
                    return figures
                if isinstance(allocated, int):
                    figures[DEVICE_PEAK_ALLOCATED] = allocated
        return figures

    def _cuda(
        self,
    ) -> tuple[Callable[[], Mapping[str, Any]], Callable[[], None], Callable[[], Any]] | None:
        """Return torch's memory statistics, peak reset and device properties (None: no CUDA).

        torch is never imported here: only a process that imported it can have used CUDA.
        """
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        try:
            if not torch.cuda.is_initialized():
                return None
        except Exception:
            return None
        cuda = torch.cuda
        return cuda.memory_stats, cuda.reset_peak_memory_stats, cuda.get_device_properties


def _total(properties: Callable[[], Any]) -> int | None:
    """Return the current device's total memory in bytes, None where it cannot be read."""
    try:
        total = properties().total_memory
    except Exception:
        return None
    return total if isinstance(total, int) and total > 0 else None


def _owner() -> MemoryReader | None:
    """Return the live reader that owns the CUDA peak reset, None if none does."""
    return _peak_owner[0]() if _peak_owner else None


def host_memory() -> tuple[int | None, int | None]:
    """Return the process's resident memory now and its peak, in bytes (None: unknown)."""
    rss: int | None = None
    try:
        with open("/proc/self/statm", "rb") as statm:
            rss = int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        rss = None
    peak = host_peak()
    return rss, None if peak is None else max(peak, rss or 0)


def host_peak() -> int | None:
    """Return the most resident memory the process has held so far, in bytes (None: unknown)."""
    try:
        import resource  # noqa: PLC0415 - not on Windows

        peak_units = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return None
    return peak_units if sys.platform == "darwin" else peak_units * 1024  # macOS: bytes


# Where a cgroup says how much memory its processes may hold: v2, then v1.
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_NO_LIMIT = 1 << 60  # cgroup v1 says "no limit" with a number near 2**63


def host_limit(cgroup_files: tuple[str, ...] = CGROUP_LIMITS) -> int | None:
    """Return the most memory this process may hold: its cgroup's limit, else physical memory."""
    physical: int | None
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * _PAGE
    except (AttributeError, ValueError, OSError):
        physical = None
    for path in cgroup_files:
        try:
            with open(path, "rb") as limit_file:
                text = limit_file.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < _NO_LIMIT:
            return int(text) if physical is None else min(int(text), physical)
        break  # "max": no limit in this cgroup
    return physical if physical is not None and physical > 0 else None


def _page_size() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 4096


_PAGE = _page_size()
