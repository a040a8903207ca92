"""A stand-in for torch's CUDA caching allocator, for the memory tests and the rank workers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

GIB = 1 << 30


class Allocator:
    """Answers `torch.cuda.memory_stats()`, its peak reset and the device's total memory."""

    def __init__(self, total: int | None = 80 * GIB) -> None:
        self.allocated = self.peak_allocated = 0
        self.reserved = self.peak_reserved = 0
        self.retries = self.ooms = 0
        self.resets = 0
        self.reads = 0
        self.total = total  # None: the device's properties cannot be read

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

    def get_device_properties(self, device: Any = None) -> SimpleNamespace:
        """Return the device's properties: its `total_memory` (no device: RuntimeError)."""
        if self.total is None:
            raise RuntimeError("no CUDA device")
        return SimpleNamespace(total_memory=self.total)

    def install(self, setattr_: Any, cuda: Any) -> Allocator:
        """Make `cuda` (torch.cuda) initialised and answered by this stand-in via `setattr_`."""
        setattr_(cuda, "is_initialized", lambda: True)
        for name in ("memory_stats", "reset_peak_memory_stats", "get_device_properties"):
            setattr_(cuda, name, getattr(self, name))
        return self
