"""Sections as torch.profiler (Kineto) ranges and NVTX ranges for Nsight Systems.

While a `torch.profiler.profile` records, every section that starts opens a `record_function`
range named by its path (`root.train.forward`), so the trace shows looptrace's sections around
the operators and kernels they launched; nothing needs to be called for that. NVTX ranges are
opened when Nsight Systems (or another NVTX tool) is attached, or after `nvtx_ranges()`. With
no profiler running a section only checks torch's own `_is_profiler_enabled` flag.
"""

from __future__ import annotations

from looptrace._base.errors import ConfigError
from looptrace._core import ranges as _ranges

__all__ = ["NVTX_TOOL_VARIABLE", "nvtx_ranges", "ranges_active"]

NVTX_TOOL_VARIABLE = _ranges.NVTX_TOOL_VARIABLE


def nvtx_ranges(enabled: bool = True) -> None:
    """Open (or stop opening) an NVTX range per section, for Nsight Systems and NVTX tools.

    They are on by default when `NVTX_INJECTION64_PATH` is set, as Nsight Systems sets it in
    the process it profiles.

    Raises:
        ConfigError: NVTX ranges were asked for and this torch cannot make them (a build
            without CUDA, or torch not installed).

    """
    if enabled:
        try:
            import torch.cuda.nvtx  # noqa: PLC0415  (the extra's host framework, on demand)

            torch.cuda.nvtx.range_end(torch.cuda.nvtx.range_start("looptrace"))
        except Exception as error:
            raise ConfigError(
                f"nvtx_ranges(): this torch cannot open NVTX ranges ({error})"
            ) from error
    _ranges.gate.nvtx = enabled


def ranges_active() -> bool:
    """Return whether a section starting now opens a range (a profiler runs, or NVTX is on)."""
    _ranges.find_profiler()
    return _ranges.active()
