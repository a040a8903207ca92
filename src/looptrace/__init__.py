"""looptrace: hierarchical lap timers for ML loops, as OpenTelemetry spans and statistics."""

from __future__ import annotations

import contextlib
import importlib
from types import FunctionType
from typing import TYPE_CHECKING, Any

from looptrace._core.build import select_core

select_core()  # LOOPTRACE_PURE_PYTHON=1: the pure-Python core, before any module of it loads

if TYPE_CHECKING:  # the names below are imported on first use: the CLI's offline commands
    # (summary, plot, perfetto) then never load the OpenTelemetry SDK
    from looptrace._base.errors import ConfigError, TimerError
    from looptrace._configure import configure
    from looptrace._core.clock import Clock, MonotonicClock
    from looptrace._core.device import DeviceClock
    from looptrace._core.open_sections import OpenSection
    from looptrace._core.section import Section
    from looptrace._core.timer import Timer
    from looptrace._diagnosis.finding import Finding
    from looptrace._distributed.ranks import RankInfo
    from looptrace._export.id_generator import StepIdGenerator
    from looptrace._export.processor import AggregatingSpanProcessor
    from looptrace._looptrace import Looptrace, ResetHook
    from looptrace._stats.health import Health
    from looptrace._stats.memory import WindowMemory
    from looptrace._stats.rates import Rate
    from looptrace._stats.snapshot import SectionStats, Snapshot
    from looptrace._stats.spread import RankSpread, RateSpread, SectionSpread
    from looptrace._stats.straggler import Straggler

__all__ = [
    "AggregatingSpanProcessor",
    "Clock",
    "ConfigError",
    "DeviceClock",
    "Finding",
    "Health",
    "Looptrace",
    "MonotonicClock",
    "OpenSection",
    "RankInfo",
    "RankSpread",
    "Rate",
    "RateSpread",
    "ResetHook",
    "Section",
    "SectionSpread",
    "SectionStats",
    "Snapshot",
    "StepIdGenerator",
    "Straggler",
    "Timer",
    "TimerError",
    "WindowMemory",
    "__version__",
    "configure",
]


_LAZY = {
    "AggregatingSpanProcessor": "looptrace._export.processor",
    "Clock": "looptrace._core.clock",
    "ConfigError": "looptrace._base.errors",
    "DeviceClock": "looptrace._core.device",
    "Finding": "looptrace._diagnosis.finding",
    "Health": "looptrace._stats.health",
    "Looptrace": "looptrace._looptrace",
    "MonotonicClock": "looptrace._core.clock",
    "OpenSection": "looptrace._core.open_sections",
    "RankInfo": "looptrace._distributed.ranks",
    "RankSpread": "looptrace._stats.spread",
    "Rate": "looptrace._stats.rates",
    "RateSpread": "looptrace._stats.spread",
    "ResetHook": "looptrace._looptrace",
    "Section": "looptrace._core.section",
    "SectionSpread": "looptrace._stats.spread",
    "SectionStats": "looptrace._stats.snapshot",
    "Snapshot": "looptrace._stats.snapshot",
    "StepIdGenerator": "looptrace._export.id_generator",
    "Straggler": "looptrace._stats.straggler",
    "Timer": "looptrace._core.timer",
    "TimerError": "looptrace._base.errors",
    "WindowMemory": "looptrace._stats.memory",
    "configure": "looptrace._configure",
}


def __getattr__(name: str) -> Any:
    """Import a public name on first use; read `__version__` from the package metadata."""
    if name == "__version__":
        from looptrace._base.version import version  # noqa: PLC0415 - read on first access

        return version()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'looptrace' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    _publish(value, name, __name__)
    globals()[name] = value  # later lookups skip this function
    return value


def _publish(value: object, name: str, public: str) -> None:
    """Name `public` as the module of the class or function `value`, exported there as `name`.

    Its repr, its documentation and pickle then say `looptrace.Snapshot`, not the private
    module that defines it (which `public` imports it from on first use). An alias exported
    under another name keeps its module (pickle finds it by its own name), and so does a type
    that refuses the change (an immutable one).
    """
    if not isinstance(value, type | FunctionType) or value.__name__ != name:
        return
    with contextlib.suppress(TypeError, AttributeError):  # an immutable (compiled) type
        value.__module__ = public
