"""Random timer call sequences and the windows they give, shared by the property tests."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from looptrace import Section, Snapshot
from looptrace.testing import Capture

TIMERS = ("training", "training.forward", "eval")
NAMES = ("data", "forward", "backward", "opt")

operations = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.sampled_from(TIMERS), st.sampled_from((None, *NAMES))),
        st.tuples(st.just("stop"), st.sampled_from(TIMERS), st.none()),
        st.tuples(st.just("enter"), st.sampled_from(TIMERS), st.sampled_from(NAMES)),
        st.tuples(st.just("exit"), st.none(), st.none()),
        st.tuples(st.just("advance"), st.integers(1, 5000), st.none()),
        st.tuples(st.just("reset"), st.none(), st.none()),
    ),
    max_size=60,
)


def window_data(snapshot: Snapshot) -> dict[str, dict[str, Any]]:
    """Return a window as plain data, NaN as None (NaN equals NaN only as the same object)."""
    return {
        path: {
            stat: None if isinstance(value, float) and math.isnan(value) else value
            for stat, value in stats.items()
        }
        for path, stats in snapshot.to_dict().items()
    }


def play(cap: Capture, ops: list[tuple[str, Any, Any]]) -> list[dict[str, Any]]:
    """Play `ops` (of `operations`) on `cap`; return every window as plain data."""
    lt, clock = cap.lt, cap.clock
    entered: list[Section] = []
    windows: list[dict[str, Any]] = []

    def timer(path: str) -> Any:
        head, *rest = path.split(".")
        found = lt.timer(head)
        for part in rest:
            found = found.timer(part)
        return found

    for op, arg, name in ops:
        if op == "record":
            timer(arg).record(name)
        elif op == "stop":
            if timer(arg).running:
                timer(arg).stop()
        elif op == "enter":
            section = timer(arg).section(name)
            section.start()
            entered.append(section)
        elif op == "exit" and entered:
            entered.pop().stop()
        elif op == "advance":
            clock.advance(arg / 1e6)
        elif op == "reset":
            windows.append(window_data(lt.reset()))
    while entered:
        entered.pop().stop()
    windows.append(window_data(lt.reset()))
    assert lt.health().misuse == 0
    return windows
