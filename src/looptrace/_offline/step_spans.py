"""The steps of never-lapped timers, given back to the spans read from files.

A never-lapped timer's step (request handling: `with serve.section("handle")`) lasts as long
as its section, so looptrace sends no span for it: the section's span is the step's root
and names the timer in `looptrace.step_of`. The offline views read spans as the statistics
count them, so the reader gives each such step back as a span of its own with the section
inside it. Sections that `record()` added to the same step (the same rank, thread, timer and
step) share that one step, from the first one's start to the last one's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from looptrace._base.attributes import (
    DEVICE_PEAK_ALLOCATED,
    HOST_PEAK_RSS,
    PATH,
    SLOW_LAP,
    STEP_OF,
    THREAD_ID,
    THREAD_NAME,
)

if TYPE_CHECKING:
    from looptrace._offline.span_records import SpanRecord

# What a lap's span carries and its sections' do not: the step's, where a section is one.
_LAP_ONLY: Final = (THREAD_ID, THREAD_NAME, SLOW_LAP, HOST_PEAK_RSS, DEVICE_PEAK_ALLOCATED)

_Key = tuple[int, int | None, str, int | None]


def with_steps(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
    """Return `spans` with the never-lapped timers' steps given back, after all of them.

    A step takes its (first) root's span id, which another rank's root names as its remote
    parent; the root becomes the section inside it, and the spans below follow it there.
    """
    steps: dict[_Key, SpanRecord] = {}
    moved: dict[tuple[int, str], str] = {}  # (rank, a root's span id) -> its section's id
    found: list[SpanRecord] = []
    for span in spans:
        timer = span.attributes.get(STEP_OF)
        if not isinstance(timer, str) or not timer.strip("."):
            found.append(span)
            continue
        key = (span.rank, span.thread_id, timer, span.step)
        step = steps.get(key)
        if step is None:
            step = steps[key] = _step(span, timer)
        else:
            start, end = min(step.start_ns, span.start_ns), max(step.end_ns, span.end_ns)
            step = steps[key] = replace(step, start_ns=start, end_ns=end)
        section = _section(span, step.span_id)
        moved[span.rank, span.span_id] = section.span_id
        found.append(section)
    sections = set(moved.values())
    found = [
        replace(span, parent_id=moved[span.rank, span.parent_id])
        if span.span_id not in sections and (span.rank, span.parent_id) in moved
        else span
        for span in found
    ]
    return [*found, *steps.values()]


def _step(root: SpanRecord, timer: str) -> SpanRecord:
    """Return the step of timer `timer` whose root span is `root`: its times, thread, figures."""
    attributes = {k: v for k, v in root.attributes.items() if k != STEP_OF}
    return replace(
        root,
        name=timer.rsplit(".", 1)[-1],
        path=timer,
        error=False,
        attributes={**attributes, PATH: timer},
        status_message="",
    )


def _section(root: SpanRecord, step_id: str) -> SpanRecord:
    """Return the section of root span `root` inside its step `step_id`, as sections read."""
    attributes = {k: v for k, v in root.attributes.items() if k != STEP_OF and k not in _LAP_ONLY}
    return replace(
        root,
        span_id=f"{root.span_id}.section",
        parent_id=step_id,
        thread_id=None,
        thread_name=None,
        attributes=attributes,
    )
