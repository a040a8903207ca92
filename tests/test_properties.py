"""Random sequences of timer calls: the in-place fast path agrees with the general path."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack, suppress
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from looptrace import Section
from looptrace.testing import capture

from .helpers.examples import examples
from .helpers.properties import NAMES, TIMERS, operations, play, window_data
from .helpers.timing import PreemptingClock, Worker


@settings(max_examples=examples(150), deadline=None)
@given(operations)
def test_fast_path_matches_general_path(ops: list[tuple[str, Any, Any]]) -> None:
    """Untraced laps (in-place switch) and traced laps (general path) give equal windows."""
    assert play(capture(trace_every=0), ops) == play(capture(trace_every=1), ops)


@settings(max_examples=examples(100), deadline=None)
@given(operations)
def test_time_is_conserved_across_windows(ops: list[tuple[str, Any, Any]]) -> None:
    """Splitting by reset() never loses or invents time: totals with and without resets agree."""
    with_resets = play(capture(trace_every=0), ops)
    without = play(capture(trace_every=0), [op for op in ops if op[0] != "reset"])
    summed: dict[str, float] = {}
    for window in with_resets:
        for path, stats in window.items():
            summed[path] = summed.get(path, 0.0) + stats["total"]
    assert {p: round(v, 9) for p, v in summed.items()} == {
        p: round(s["total"], 9) for p, s in without[-1].items()
    }
    # Each interval is counted once, whole, in the window it ends in.
    assert _counts(with_resets) == _counts(without)


# Every public call: a step is (call, timer, name, number); timers by path below `root`.
calls = st.lists(
    st.one_of(
        st.tuples(
            st.just("record"), st.sampled_from(TIMERS), st.sampled_from((None, *NAMES)), st.none()
        ),
        st.tuples(st.just("stop"), st.sampled_from(TIMERS), st.none(), st.none()),
        # A section entered by `start()` or a `with` block, left by a later "exit".
        st.tuples(
            st.sampled_from(("start", "with")),
            st.sampled_from(TIMERS),
            st.sampled_from(NAMES),
            st.none(),
        ),
        st.tuples(st.just("exit"), st.none(), st.none(), st.none()),
        st.tuples(st.just("raise"), st.sampled_from(TIMERS), st.sampled_from(NAMES), st.none()),
        # A decorated function whose body records a section of its own or enters another.
        st.tuples(
            st.just("timed"), st.sampled_from(TIMERS), st.sampled_from(NAMES), st.integers(0, 2)
        ),
        # iterate() over `number` items, the loop left by `break` after the second one.
        st.tuples(
            st.sampled_from(("iterate", "iterate-break")),
            st.sampled_from(TIMERS),
            st.sampled_from(NAMES),
            st.integers(0, 4),
        ),
        # `number` steps of a loop: the calls the in-place paths serve, from the second step on.
        st.tuples(st.just("loop"), st.sampled_from(TIMERS), st.none(), st.integers(1, 3)),
        # `number` rounds of sections alone, as request handling does: on a timer never
        # lapped, each is a step of its own (the in-place paths serve them from the second).
        st.tuples(st.just("sections"), st.sampled_from(TIMERS), st.none(), st.integers(1, 3)),
        st.tuples(st.just("advance"), st.none(), st.none(), st.integers(1, 5000)),
        st.tuples(st.just("reset"), st.none(), st.none(), st.none()),
        st.tuples(st.just("timer-reset"), st.sampled_from(TIMERS), st.none(), st.none()),
    ),
    max_size=60,
)


def _run(  # noqa: PLR0912 - a branch per public call
    ops: list[tuple[str, Any, Any, Any]], *, trace_every: int, in_place: bool
) -> dict[str, Any]:
    """Play every public call of `ops`; return the windows, spans and health it left."""
    cap = capture(trace_every=trace_every)
    lt, clock = cap.lt, cap.clock
    lt._engine.in_place = in_place  # the test-only switch (Engine.in_place)
    exits: list[Callable[[], object]] = []  # of the sections entered and not left, in order
    windows: list[dict[str, Any]] = []

    def timer(path: str) -> Any:
        head, *rest = path.split(".")
        found = lt.timer(head)
        for part in rest:
            found = found.timer(part)
        return found

    def body(owner: Any, name: str, kind: int) -> None:
        clock.advance(0.000_25)
        if kind == 1:
            owner.timer(name).record("inner")
        elif kind == 2:
            with owner.section("data"):
                clock.advance(0.000_5)

    for op, path, name, number in ops:
        if op == "record":
            timer(path).record(name)
        elif op == "stop":
            if timer(path).running:
                timer(path).stop()
        elif op == "start":
            section = timer(path).section(name)
            section.start()
            exits.append(section.stop)
        elif op == "with":  # as `with` does it: `type(m).__enter__(m)`, then `__exit__`
            block = ExitStack()
            block.enter_context(timer(path).section(name))
            exits.append(block.close)
        elif op == "exit" and exits:
            exits.pop()()
        elif op == "raise":
            with suppress(KeyError), timer(path).section(name):
                clock.advance(0.000_125)
                raise KeyError(name)
        elif op == "timed":
            owner = timer(path)
            owner.timed(name)(body)(owner, name, number)
        elif op in {"iterate", "iterate-break"}:
            for index, _ in enumerate(timer(path).iterate(range(number), name)):
                clock.advance(0.000_75)
                if op == "iterate-break" and index == 1:
                    break
        elif op == "loop":
            _loop(timer(path), clock, number)
        elif op == "sections":
            _sections(timer(path), clock, number)
        elif op == "advance":
            clock.advance(number / 1e6)
        elif op == "reset":
            windows.append(window_data(lt.reset()))
        elif op == "timer-reset":
            windows.append(window_data(timer(path).reset()))
    while exits:
        exits.pop()()
    windows.append(window_data(lt.reset()))
    health = lt.health()
    lt.shutdown()
    return {"windows": windows, "spans": cap.span_tree(), "health": health}


def _loop(owner: Any, clock: Any, steps: int) -> None:
    """Run `steps` steps of a training loop on `owner`: sections recorded and entered, a lap."""
    for _ in range(steps):
        owner.record("data")
        clock.advance(0.001)
        owner.record("forward")
        clock.advance(0.002)
        owner.record("backward")
        clock.advance(0.003)
        with owner.section("opt"):
            clock.advance(0.000_5)
        owner.record()


def _sections(owner: Any, clock: Any, rounds: int) -> None:
    """Enter and leave two sections of `owner` `rounds` times, never lapping it."""
    for _ in range(rounds):
        with owner.section("data"):
            clock.advance(0.001)
        with owner.section("forward"):
            clock.advance(0.002)


@settings(max_examples=examples(200), deadline=None)
@given(calls, st.sampled_from((0, 1, 2)))
# A never-lapped timer's section, lapped by `record` of its own name: each lap is a span.
@example(
    [
        ("start", "training", "data", None),
        ("record", "training", "data", None),
        ("record", "training", "data", None),
    ],
    1,
)
def test_every_call_sequence_gives_the_same_result_in_place_and_not(
    ops: list[tuple[str, Any, Any, Any]], trace_every: int
) -> None:
    """Every public call sequence gives the same spans, windows and counts in place and not.

    The in-place paths (a lap, a sibling switch, a section's entry and exit, a never-lapped
    timer's step) are switched off for the general run; sampling traces every step, none, or
    every other one.
    """
    fast = _run(ops, trace_every=trace_every, in_place=True)
    general = _run(ops, trace_every=trace_every, in_place=False)
    assert fast == general
    assert fast["health"].misuse == 0


def _counts(windows: list[dict[str, Any]]) -> dict[str, int]:
    summed: dict[str, int] = {}
    for window in windows:
        for path, stats in window.items():
            summed[path] = summed.get(path, 0) + stats["count"]
    return {path: n for path, n in summed.items() if n}


THREAD_TIMERS = ("training", "eval")
thread_operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("record"),
            st.integers(0, 1),
            st.sampled_from(THREAD_TIMERS),
            st.sampled_from((None, *NAMES)),
        ),
        st.tuples(st.just("stop"), st.integers(0, 1), st.sampled_from(THREAD_TIMERS), st.none()),
        st.tuples(
            st.just("enter"),
            st.integers(0, 1),
            st.sampled_from(THREAD_TIMERS),
            st.sampled_from(NAMES),
        ),
        st.tuples(st.just("exit"), st.integers(0, 1), st.none(), st.none()),
        st.tuples(st.just("advance"), st.integers(1, 5000), st.none(), st.none()),
        st.tuples(st.just("reset"), st.integers(0, 3), st.none(), st.none()),
    ),
    max_size=50,
)


def _play_threads(ops: list[tuple[str, Any, Any, Any]], *, resets: bool) -> list[dict[str, Any]]:
    """Play `ops` on two worker threads.

    A reset, from the test thread, is preempted right after it reads the clock while the next
    `arg` operations run.
    """
    clock = PreemptingClock()
    cap = capture(trace_every=0, clock=clock)
    lt = cap.lt
    workers = [Worker(), Worker()]
    entered: list[list[Section]] = [[], []]
    windows: list[dict[str, Any]] = []

    def play(op: str, arg: Any, timer: Any, name: Any) -> None:
        if op == "advance":
            clock.advance(arg / 1e6)
            return
        worker, stack = workers[arg], entered[arg]
        found = None if timer is None else lt.timer(timer)
        if op == "record":
            worker.run(lambda: found.record(name))
        elif op == "stop":
            worker.run(lambda: found.running and found.stop())
        elif op == "enter":
            section = found.section(name)
            worker.run(section.start)
            stack.append(section)
        elif op == "exit" and stack:
            worker.run(stack.pop().stop)

    pending = list(ops)
    while pending:
        op, arg, timer, name = pending.pop(0)
        if op != "reset":
            play(op, arg, timer, name)
            continue
        if not resets:
            continue
        preempted = [o for o in pending[:arg] if o[0] != "reset"]
        del pending[:arg]
        clock.on_read = lambda preempted=preempted: [play(*o) for o in preempted]
        windows.append(window_data(lt.reset()))
    for index, worker in enumerate(workers):
        while entered[index]:
            worker.run(entered[index].pop().stop)
        for timer in THREAD_TIMERS:
            found = lt.timer(timer)
            worker.run(lambda found=found: found.running and found.stop())
        worker.close()
    windows.append(window_data(lt.reset()))
    assert lt.health().misuse == 0
    return windows


@settings(max_examples=examples(100), deadline=None)
@given(thread_operations)
def test_two_threads_and_resets_neither_invent_nor_lose_time(
    ops: list[tuple[str, Any, Any, Any]],
) -> None:
    """Two threads timing and resets preempted at any point: every second is counted once."""
    with_resets = _play_threads(ops, resets=True)
    without = _play_threads(ops, resets=False)
    summed: dict[str, float] = {}
    for window in with_resets:
        for path, stats in window.items():
            summed[path] = summed.get(path, 0.0) + stats["total"]
        outermost = sum(window.get(f"root.{t}", {}).get("total", 0.0) for t in THREAD_TIMERS)
        selves = sum(stats["self_time"] for stats in window.values())
        assert round(selves, 9) == round(outermost, 9)  # self time + children = total
    assert {p: round(v, 9) for p, v in summed.items() if round(v, 9)} == {
        p: round(s["total"], 9) for p, s in without[-1].items() if round(s["total"], 9)
    }
    assert _counts(with_resets) == _counts(without)
