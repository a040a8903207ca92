"""looptrace's own time inside `reset()` stays out of the user's laps; it is `overhead`."""

from __future__ import annotations

import threading

import pytest

from looptrace import Snapshot
from looptrace.testing import Capture, capture

HOOK_S = 0.06  # what a slow on_reset hook costs, on the fake clock
STEP_S = 0.1


def _run(cap: Capture, windows: int, steps: int) -> list[Snapshot]:
    """Lap `root.train` with one `forward` section; reset every `steps` laps, inside a lap."""
    train = cap.lt.timer("train")
    cap.lt.on_reset(lambda _snapshot: cap.clock.advance(HOOK_S))
    seen = []
    for _ in range(windows):
        for _ in range(steps):
            train.record()
            with train.section("forward"):
                cap.clock.advance(STEP_S)
        seen.append(cap.lt.reset())
    return seen


def test_a_slow_on_reset_hook_is_no_lap_time_self_time_or_slow_step(cap: Capture) -> None:
    """A hook's 60 ms lands in no lap: self time 0, every lap 0.1 s, no finding of it."""
    windows = _run(cap, windows=4, steps=5)
    later = windows[1:]
    for snapshot in later:
        lap = snapshot["root.train"]
        assert lap.self_time == pytest.approx(0.0, abs=1e-9)
        assert lap.max == pytest.approx(STEP_S)
        assert lap.total == pytest.approx(5 * STEP_S)
        kinds = {f.kind for f in snapshot.diagnosis() if f.severity != "info"}
        assert not kinds & {"self_time", "slow_steps", "throughput_drop"}


def test_the_reset_time_is_the_next_windows_overhead(cap: Capture) -> None:
    """`snapshot.overhead` is the previous reset's own time: 0 first, then the hook's 60 ms."""
    windows = _run(cap, windows=3, steps=2)
    assert [round(s.overhead, 9) for s in windows] == [0.0, HOOK_S, HOOK_S]


def test_a_reset_from_another_thread_moves_no_lap_of_this_one(cap: Capture) -> None:
    """Only the thread that ran the reset skips its time: others' laps went on meanwhile."""
    train = cap.lt.timer("train")
    cap.lt.on_reset(lambda _snapshot: cap.clock.advance(HOOK_S))
    train.record()
    cap.clock.advance(STEP_S)
    other = threading.Thread(target=cap.lt.reset)
    other.start()
    other.join()
    train.record()
    snapshot = cap.lt.reset()
    assert snapshot["root.train"].total == pytest.approx(HOOK_S)
    assert snapshot["root.train"].max == pytest.approx(STEP_S + HOOK_S)


def test_a_subtree_reset_also_keeps_its_time_out_of_the_other_timers(cap: Capture) -> None:
    """A timer's own reset inside another timer's lap is not that lap's time either."""
    outer = cap.lt.timer("outer")
    inner = cap.lt.timer("inner")
    cap.lt.on_reset(lambda _snapshot: cap.clock.advance(HOOK_S))
    outer.record()
    inner.record()
    cap.clock.advance(STEP_S)
    inner.reset()
    cap.clock.advance(STEP_S)
    outer.record()
    inner.record()
    snapshot = cap.lt.reset()
    assert snapshot["root.outer"].max == pytest.approx(2 * STEP_S)
    assert snapshot["root.inner"].max == pytest.approx(2 * STEP_S)
    assert snapshot.overhead == pytest.approx(HOOK_S)


def _lap(cap: Capture, *, reset: bool = False, decoder_s: float = 0.1) -> None:
    """One untraced lap of `training`: data 0.1 s (a reset after it), then forward."""
    train = cap.lt.timer("training")
    train.record("data")
    cap.clock.advance(0.1)
    if reset:
        cap.lt.reset()
    train.record("forward")
    cap.clock.advance(decoder_s)
    train.record()


def _slow_laps(cap: Capture) -> list[str]:
    return sorted(
        s.name for s in cap.finished_spans() if "looptrace.slow_lap" in (s.attributes or {})
    )


def test_a_reset_with_a_slow_hook_makes_no_slow_lap_trace() -> None:
    """A lap 0.2 s long around a 1 s hook is not a slow lap: nothing is traced for it."""
    cap = capture(trace_every=0)
    cap.lt.on_reset(lambda _snapshot: cap.clock.advance(1.0))
    for _ in range(12):
        _lap(cap)
    _lap(cap, reset=True)
    cap.lt.timer("training").stop()
    cap.lt.shutdown()
    assert _slow_laps(cap) == []


def test_a_slow_lap_around_a_reset_is_traced_with_its_sections_before_it() -> None:
    """A lap slow in forward, reset inside it, is traced whole: data before the reset too."""
    cap = capture(trace_every=0)
    cap.lt.on_reset(lambda _snapshot: cap.clock.advance(1.0))
    for _ in range(12):
        _lap(cap)
    _lap(cap, reset=True, decoder_s=3.0)
    cap.lt.timer("training").stop()
    cap.lt.shutdown()
    assert _slow_laps(cap) == ["training"]
    assert sorted(s["name"] for s in cap.span_tree()) == ["data", "forward", "training"]
