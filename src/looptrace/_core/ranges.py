"""Profiler ranges of sections: torch.profiler (Kineto) `record_function` ranges and NVTX ranges.

The engine calls `active()` when an interval starts and `end()` when one ends while any range is
open; it takes its general (not in-place) path meanwhile, so every interval start and end passes
through here. torch is never imported: the Kineto gate is torch's own flag,
`torch.autograd.profiler._is_profiler_enabled`, read once torch has imported that module, which
`find_profiler()` looks for at each outermost lap; until then a section costs two reads.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from looptrace._core.intervals import Interval

_PROFILER = "torch.autograd.profiler"
_ENABLED: Final = "_is_profiler_enabled"  # its flag: True while a profiler runs
_MODULES: Final = sys.modules  # the module table, bound once: read at every outermost lap
# Set by Nsight Systems (and other NVTX tools) in the profiled process to attach to NVTX.
NVTX_TOOL_VARIABLE = "NVTX_INJECTION64_PATH"

_logger = logging.getLogger("looptrace")


class _Gate:
    """What turns ranges on: torch's profiler module once seen, and NVTX when asked or attached."""

    __slots__ = ("failed", "flags", "modules_seen", "nvtx", "profiler")

    def __init__(self) -> None:
        self.profiler: Any = None
        # The profiler module's globals, where torch keeps its flag: a section reads it with
        # one dictionary lookup, without the type lookup of a module attribute read.
        self.flags: dict[str, object] | None = None
        self.modules_seen = 0  # how many modules were loaded when the profiler was looked for
        self.nvtx = bool(os.environ.get(NVTX_TOOL_VARIABLE))
        self.failed = False


gate: Final = _Gate()

# The ranges of running intervals: id(interval) -> (record_function or None, NVTX id or None).
OPEN: Final[dict[int, tuple[Any, int | None]]] = {}


def active() -> bool:
    """Return whether a starting interval opens a range (a profiler runs, or NVTX is on)."""
    if gate.nvtx:
        return True
    flags = gate.flags
    return flags is not None and bool(flags.get(_ENABLED))


def quiet() -> bool:
    """Return whether no range is open and none would open: the engine may work in place."""
    return not OPEN and not active()


def find_profiler() -> None:
    """Look for torch's profiler module (at each outermost lap) until torch has imported it.

    The module table is searched only when its size changed since the last look.
    """
    if gate.profiler is None and len(_MODULES) != gate.modules_seen:
        profiler = _MODULES.get(_PROFILER)
        if profiler is None:
            gate.modules_seen = len(_MODULES)
        elif hasattr(profiler, _ENABLED):  # else still importing: look again
            gate.profiler = profiler
            gate.flags = vars(profiler)


def begin(interval: Interval) -> None:
    """Open the ranges of a starting interval, named by its path; never raises."""
    try:
        kineto = None
        profiler = gate.profiler
        if profiler is not None and profiler._is_profiler_enabled:
            kineto = profiler.record_function(interval.node.path)
            kineto.__enter__()
        nvtx_id = None
        if gate.nvtx:
            nvtx_id = sys.modules["torch"].cuda.nvtx.range_start(interval.node.path)
        OPEN[id(interval)] = (kineto, nvtx_id)
    except Exception:
        _failed("opening a profiler range")


def end(interval: Interval) -> None:
    """Close the ranges of an ending interval, if it opened any; never raises."""
    ranges = OPEN.pop(id(interval), None)
    if ranges is None:
        return
    kineto, nvtx_id = ranges
    try:
        if nvtx_id is not None:
            sys.modules["torch"].cuda.nvtx.range_end(nvtx_id)
        if kineto is not None:
            kineto.__exit__(None, None, None)
    except Exception:
        _failed("closing a profiler range")


# A forked child (a DataLoader worker) has no profiler session of its parent's.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=OPEN.clear)


def _failed(what: str) -> None:
    if not gate.failed:
        gate.failed = True
        _logger.warning("looptrace: %s failed; ranges may be missing", what, exc_info=True)
