"""Random sequences of timer calls: the in-place fast path agrees with the general path."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from looptrace import Section
from looptrace.testing import Capture, capture

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


def _play(cap: Capture, ops: list[tuple[str, Any, Any]]) -> list[dict[str, Any]]:
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
            windows.append(lt.reset().to_dict())
    while entered:
        entered.pop().stop()
    windows.append(lt.reset().to_dict())
    assert lt.health().misuse == 0
    return windows


@settings(max_examples=150, deadline=None)
@given(operations)
def test_fast_path_matches_general_path(ops: list[tuple[str, Any, Any]]) -> None:
    """Untraced laps (in-place switch) and traced laps (general path) give equal windows."""
    assert _play(capture(trace_every=0), ops) == _play(capture(trace_every=1), ops)


@settings(max_examples=100, deadline=None)
@given(operations)
def test_time_is_conserved_across_windows(ops: list[tuple[str, Any, Any]]) -> None:
    """Splitting by reset() never loses or invents time: totals with and without resets agree."""
    with_resets = _play(capture(trace_every=0), ops)
    without = _play(capture(trace_every=0), [op for op in ops if op[0] != "reset"])
    summed: dict[str, float] = {}
    for window in with_resets:
        for path, stats in window.items():
            summed[path] = summed.get(path, 0.0) + stats["total"]
    assert {p: round(v, 9) for p, v in summed.items()} == {
        p: round(s["total"], 9) for p, s in without[-1].items()
    }
