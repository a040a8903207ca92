"""looptrace: hierarchical lap timers for ML loops, as OpenTelemetry spans and statistics."""

from __future__ import annotations

from looptrace._clock import Clock, MonotonicClock
from looptrace._configure import configure
from looptrace._errors import ConfigError, TimerError
from looptrace._health import Health
from looptrace._ids import StepIdGenerator
from looptrace._looptrace import Looptrace
from looptrace._processor import AggregatingSpanProcessor
from looptrace._ranks import RankInfo
from looptrace._sampling import LapSampler
from looptrace._snapshot import SectionStats, Snapshot
from looptrace._spread import RankSpread, SectionSpread
from looptrace._timer import Section, Timer

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
        from looptrace._version import version  # noqa: PLC0415 - read on first access

        return version()
    raise AttributeError(f"module 'looptrace' has no attribute {name!r}")
