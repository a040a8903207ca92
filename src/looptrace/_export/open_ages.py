"""The ages of the open steps and innermost sections, as gauges read when metrics are collected.

One reading of every thread's open sections (`read_open`) gives both: the age of each open
step per timer and thread (`looptrace_step_open_seconds`) and of each thread's innermost open
section by path (`looptrace_open_section_seconds`). The Prometheus endpoint reads them at each
scrape (`open_gauges`), the OTLP pushes at each push (`OpenAges.otlp`, pushed also when the
watchdog reports a hang, since no window closes then). Nothing runs per section.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from opentelemetry.sdk.metrics.export import Metric

from looptrace._core.open_sections import OpenSection, read_open
from looptrace._export.metric_data import Points, gauge

if TYPE_CHECKING:
    from looptrace._core.engine import Engine

STEP_FAMILY: Final = "looptrace_step_open_seconds"
SECTION_FAMILY: Final = "looptrace_open_section_seconds"
STEP_DESCRIPTION: Final = "Age of each open step (outermost lap), per timer and thread"
SECTION_DESCRIPTION: Final = "Age of each thread's innermost open section, by path"
OTLP_STEP: Final = "looptrace.step.open"  # the OTLP names (unit s): dotted, as the others
OTLP_SECTION: Final = "looptrace.open_section"
THREAD: Final = "thread.name"
TIMER: Final = "looptrace.timer"
PATH: Final = "looptrace.path"


class OpenAges:
    """Reads the open steps' and innermost sections' ages of one engine, with rank attributes."""

    def __init__(self, engine: Callable[[], Engine | None], attributes: dict[str, int]) -> None:
        self._engine = engine  # None once the `Looptrace` is gone
        self.attributes = attributes

    def read(self) -> tuple[Points, Points, int]:
        """Return (step points, section points, epoch ns now); both empty once closed."""
        engine = self._engine()
        if engine is None or engine.closed:
            return [], [], 0
        now = engine.now()
        sections = read_open(engine.states.all(), now)
        base: dict[str, str | int] = dict(self.attributes)
        steps: Points = [
            ({**base, THREAD: s.thread_name, TIMER: s.path}, s.seconds)
            for s in sections
            if s.depth == 0
        ]
        innermost: dict[int, OpenSection] = {}
        for section in sections:
            known = innermost.get(section.thread_id)
            if known is None or section.depth >= known.depth:
                innermost[section.thread_id] = section
        inner: Points = [
            ({**base, THREAD: s.thread_name, PATH: s.path}, s.seconds) for s in innermost.values()
        ]
        return steps, inner, engine.anchor.epoch_ns(now)

    def otlp(self) -> list[Metric]:
        """Return both gauges as OTLP metrics (none while nothing is open)."""
        steps, inner, now = self.read()
        return [
            gauge(name, description, "s", points, start=now, now=now)
            for name, description, points in (
                (OTLP_STEP, STEP_DESCRIPTION, steps),
                (OTLP_SECTION, SECTION_DESCRIPTION, inner),
            )
            if points
        ]
