"""When a step that has not ended counts as hung: the threshold, and the events the watchdog tells.

The threshold of a timer's open step is `factor` times that timer's recent step time, never
less than `floor_s`: the multiple lets a long eval or checkpoint step pass, the floor keeps a
fast loop's jitter (a garbage collection, a slow batch) from counting as a hang. The recent
step time is read from what the watchdog sees, never from the hot path: the step number and
start of each timer's open step at each look, averaged over the last `SAMPLES` steps it saw
begin. Before any step ended there is no step time and the floor alone holds.

`HangPolicy.look()` is a pure function of what it is shown (the open sections, the time), so
tests drive it with a fake clock; the watchdog thread shows it the engine's state once a
second.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

from looptrace._core.open_sections import OpenSection

SAMPLES: Final = 16  # step starts kept per timer for its recent step time

Key = tuple[int, str]  # (thread id, timer path) of an open step


@dataclass(frozen=True, slots=True)
class HangEvent:
    """What the watchdog reports: a step hung (`hang`), still hung (`repeat`), or `cleared`.

    `seconds` is the step's age (for `cleared`, how long it lasted, as far as the watchdog
    could see: to the start of the next step of its timer, else to the look that missed it).
    """

    kind: str  # "hang", "repeat" or "cleared"
    thread_id: int
    thread_name: str
    path: str  # the timer whose step hung
    step: int
    seconds: float
    threshold_s: float


@dataclass
class _Hung:
    step: int
    start_ns: int
    thread_name: str
    threshold_s: float
    reported_ns: int  # the latest report (hang or repeat), monotonic


@dataclass
class HangPolicy:
    """The thresholds, the recent step times and the steps reported hung, per timer and thread."""

    factor: float
    floor_s: float
    repeat_s: float
    _starts: dict[Key, deque[tuple[int, int]]] = field(default_factory=dict)
    _hung: dict[Key, _Hung] = field(default_factory=dict)

    def step_seconds(self, key: Key) -> float | None:
        """Return the mean step time of the last steps seen begin for `key`, None if unknown."""
        starts = self._starts.get(key)
        if not starts or len(starts) < 2:
            return None
        (first_step, first_ns), (last_step, last_ns) = starts[0], starts[-1]
        return (last_ns - first_ns) / 1e9 / (last_step - first_step)

    def threshold_s(self, key: Key) -> float:
        """Return the age past which the open step of `key` is hung."""
        recent = self.step_seconds(key)
        return self.floor_s if recent is None else max(self.floor_s, self.factor * recent)

    def standing(self) -> bool:
        """Whether a step reported hung is still open, as far as the last look saw."""
        return bool(self._hung)

    def deadline_ns(self, sections: list[OpenSection]) -> int | None:
        """Return the earliest monotonic instant an open step not reported yet turns hung."""
        deadlines = [
            section.start_ns + int(self.threshold_s((section.thread_id, section.path)) * 1e9)
            for section in sections
            if section.depth == 0 and (section.thread_id, section.path) not in self._hung
        ]
        return min(deadlines, default=None)

    def look(self, sections: list[OpenSection], now: int) -> list[HangEvent]:
        """Take in the open sections at monotonic `now`; return what to report."""
        events: list[HangEvent] = []
        steps = {(s.thread_id, s.path): s for s in sections if s.depth == 0}
        for key, hung in list(self._hung.items()):
            open_step = steps.get(key)
            if open_step is not None and open_step.step == hung.step:
                continue
            end = now if open_step is None else open_step.start_ns
            del self._hung[key]
            seconds = max(0, end - hung.start_ns) / 1e9
            events.append(
                HangEvent(
                    "cleared", key[0], hung.thread_name, key[1], hung.step, seconds,
                    hung.threshold_s,
                )
            )  # fmt: skip
        for key, section in steps.items():
            self._seen(key, section)
            age = max(0, now - section.start_ns) / 1e9
            standing = self._hung.get(key)
            if standing is None:
                threshold = self.threshold_s(key)
                if age >= threshold:
                    self._hung[key] = _Hung(
                        section.step, section.start_ns, section.thread_name, threshold, now
                    )
                    events.append(_event("hang", section, age, threshold))
            elif now - standing.reported_ns >= self.repeat_s * 1e9:
                standing.reported_ns = now
                events.append(_event("repeat", section, age, standing.threshold_s))
        for key in [key for key in self._starts if key not in steps and key not in self._hung]:
            if len(self._starts) > SAMPLES * 64:  # timers gone for good: bounded memory
                del self._starts[key]
        return events

    def _seen(self, key: Key, section: OpenSection) -> None:
        starts = self._starts.get(key)
        if starts is None:
            starts = self._starts[key] = deque(maxlen=SAMPLES)
        if not starts or starts[-1][0] != section.step:
            if starts and section.step < starts[-1][0]:
                starts.clear()  # a new timer under an old name (a thread id reused)
            starts.append((section.step, section.start_ns))


def _event(kind: str, section: OpenSection, age: float, threshold: float) -> HangEvent:
    return HangEvent(
        kind, section.thread_id, section.thread_name, section.path, section.step, age, threshold
    )
