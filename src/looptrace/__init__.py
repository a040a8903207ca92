"""looptrace: hierarchical lap timers for ML loops, as OpenTelemetry spans and statistics."""

from __future__ import annotations

__version__ = "0.1.0"

from looptrace._clock import Clock, MonotonicClock
from looptrace._configure import configure
from looptrace._errors import TimerError
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
