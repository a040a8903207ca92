"""One span as the offline commands use it, whichever reader made it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

UNNAMED = "(unnamed)"


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span as the offline commands use it; ids are hex, times epoch nanoseconds."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    path: str
    start_ns: int
    end_ns: int
    rank: int
    step: int | None
    thread_id: int | None
    thread_name: str | None
    host: str | None
    error: bool
    attributes: dict[str, Any]
    status_message: str = ""  # the error's description ("ValueError: ...") on an ERROR span
    writer: str | None = None  # the `service.instance.id` of the process that wrote it

    @property
    def duration_ns(self) -> int:
        """Return the duration in nanoseconds (never negative)."""
        return max(0, self.end_ns - self.start_ns)


def section_path(attribute: object, name: str) -> str:
    """Return the span's section path: `looptrace.path`, else its name; never empty."""
    if isinstance(attribute, str) and attribute.strip("."):
        return attribute
    return name if name.strip(".") else UNNAMED
