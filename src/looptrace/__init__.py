"""looptrace: hierarchical lap timers for ML loops, as OpenTelemetry spans and statistics."""

from __future__ import annotations

from looptrace._configure import configure
from looptrace._core.clock import Clock, MonotonicClock
from looptrace._core.sampling import LapSampler
from looptrace._core.timer import Section, Timer
from looptrace._distributed.ranks import RankInfo
from looptrace._export.id_generator import StepIdGenerator
from looptrace._export.processor import AggregatingSpanProcessor
from looptrace._looptrace import Looptrace
from looptrace._stats.errors import ConfigError, TimerError
from looptrace._stats.health import Health
from looptrace._stats.snapshot import SectionStats, Snapshot
from looptrace._stats.spread import RankSpread, SectionSpread

__all__ = [
    "AggregatingSpanProcessor",
    "Clock",
    "ConfigError",
    "Health",
    "LapSampler",
    "Looptrace",
    "MonotonicClock",
    "RankInfo",
    "RankSpread",
    "Section",
    "SectionSpread",
    "SectionStats",
    "Snapshot",
    "StepIdGenerator",
    "Timer",
    "TimerError",
    "__version__",
    "configure",
]


def __getattr__(name: str) -> str:
    """Read `__version__` from the package metadata on first access (structlog does the same)."""
    if name == "__version__":
        from looptrace._stats.version import version  # noqa: PLC0415 - read on first access

        return version()
    raise AttributeError(f"module 'looptrace' has no attribute {name!r}")
