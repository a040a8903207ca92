"""Slow laps: an untraced step much slower than its timer's recent median is traced whole."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import looptrace
from looptrace import ConfigError, RankInfo
from looptrace._core.ids import step_ids
from looptrace._core.slow_laps import (
    BUDGET,
    ENTRY_ITEMS,
    MAX_RECORD,
    MIN_LAPS,
    WINDOW,
    Entry,
    entries_of,
    nest,
)
from looptrace._export.settings import slow_lap_factor
from looptrace._stats.aggregator import FOLD_AT
from looptrace.testing import Capture, FakeClock, capture

from .helpers.examples import examples
from .helpers.properties import operations, play, window_data

RUN = "run-1"
FAST_S = 0.3  # a normal step: data 0.1, forward 0.1 (encoder, decoder), optimizer 0.1


def _step(cap: Capture, *, decoder_s: float = 0.05, evaluate_s: float = 0.0) -> None:
    """One lap of `training`: data, forward (encoder, decoder), a `with` optimizer, evaluate.

    `evaluate` runs only when it takes time: a lap of another kind (an evaluation step).
    """
    train = cap.lt.timer("training")
    forward = train.timer("forward")
    train.record("data")
    cap.clock.advance(0.1)
    train.record("forward")
    forward.record("encoder")
    cap.clock.advance(0.05)
    forward.record("decoder")
    cap.clock.advance(decoder_s)
    with train.section("optimizer"):
        cap.clock.advance(0.1)
    if evaluate_s:
        with train.section("evaluate"):
            cap.clock.advance(evaluate_s)
    train.record()


def _tree(cap: Capture) -> list[tuple[Any, ...]]:
    return [
        (s["name"], s["parent"], s["step"], round(s["start"], 6), round(s["end"], 6))
        for s in cap.span_tree()
    ]


def test_a_slow_untraced_lap_is_exported_whole_under_its_steps_trace() -> None:
    """An unsampled step 10x the median: every section, real times, nesting, the step's ids."""
    cap = capture(trace_every=0, run_id=RUN)
    for _ in range(12):
        _step(cap)
    _step(cap, decoder_s=2.75)  # step 12: 3.0 s against a median of 0.3 s
    cap.lt.timer("training").stop()
    cap.lt.shutdown()  # the window's candidates are exported when it ends
    assert _tree(cap) == [  # step 12 starts at 12 x 0.3 s = 3.6 s
        ("data", "training", 12, 3.6, 3.7),
        ("encoder", "forward", 12, 3.7, 3.75),
        ("decoder", "forward", 12, 3.75, 6.5),
        ("forward", "training", 12, 3.7, 6.5),
        ("optimizer", "training", 12, 6.5, 6.6),
        ("training", None, 12, 3.6, 6.6),
    ]
    spans = cap.finished_spans()
    lap = spans[-1]
    assert lap.context is not None
    assert (lap.context.trace_id, lap.context.span_id) == step_ids(RUN, "root.training", 12)
    assert {s.context.trace_id for s in spans if s.context} == {lap.context.trace_id}
    attributes = dict(lap.attributes or {})
    assert attributes["looptrace.slow_lap"] == pytest.approx(10.0)
    assert {k: attributes[k] for k in ("looptrace.path", "looptrace.step", "thread.name")} == {
        "looptrace.path": "root.training",
        "looptrace.step": 12,
        "thread.name": "MainThread",
    }
    assert dict(spans[1].attributes or {}) == {
        "looptrace.path": "root.training.forward.encoder",
        "looptrace.step": 12,
        "looptrace.rank": 0,
        "looptrace.world_size": 1,
    }
    assert cap.lt.health().slow_laps_suppressed == 0


def test_on_another_rank_the_slow_lap_names_the_steps_root_as_parent() -> None:
    """Rank 1's slow lap joins step N's trace under rank 0's (derived) root span id."""
    cap = capture(trace_every=0, run_id=RUN, rank=RankInfo(rank=1, world_size=2))
    for _ in range(11):
        _step(cap)
    _step(cap, decoder_s=3.0)
    cap.lt.shutdown()
    lap = cap.finished_spans()[-1]
    trace_id, root_id = step_ids(RUN, "root.training", 11)
    assert lap.context is not None and lap.parent is not None
    assert (lap.context.trace_id, lap.parent.span_id, lap.parent.is_remote) == (
        trace_id,
        root_id,
        True,
    )


def test_normal_laps_and_too_early_laps_are_not_exported() -> None:
    """Laps within the factor, and a slow lap before 10 laps were seen, make no spans."""
    cap = capture(trace_every=0)
    for _ in range(MIN_LAPS - 1):
        _step(cap)
    _step(cap, decoder_s=5.0)  # slow, but only 9 laps seen
    for index in range(30):
        _step(cap, decoder_s=0.05 + 0.01 * (index % 7))  # jitter well within 3x
    _step(cap, decoder_s=0.5)  # 0.75 s: 2.5x the median
    cap.lt.shutdown()
    assert cap.finished_spans() == []


def test_a_lap_of_microseconds_is_not_slow_below_a_millisecond_more() -> None:
    """Steps of 30 µs: one of 900 µs (30x) is noise, not traced; one of 1.1 ms is."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("training")
    for lap_s in [30e-6] * 12 + [900e-6, 30e-6, 1100e-6]:
        train.record("data")
        cap.clock.advance(lap_s)
        train.record()
    cap.lt.shutdown()
    assert [s.name for s in cap.finished_spans()] == ["data", "training"]
    assert (cap.finished_spans()[-1].attributes or {})["looptrace.step"] == 14


def test_a_sampled_slow_lap_is_traced_once() -> None:
    """A slow lap that the sampler traces anyway is not exported a second time."""
    cap = capture(trace_every=13)
    for _ in range(13):
        _step(cap)
    _step(cap, decoder_s=3.0)  # step 13: sampled
    names = [s.name for s in cap.finished_spans() if (s.attributes or {})["looptrace.step"] == 13]
    assert names == ["data", "encoder", "decoder", "forward", "optimizer", "training"]
    assert all("looptrace.slow_lap" not in (s.attributes or {}) for s in cap.finished_spans())


@pytest.mark.parametrize("factor", [None, "off"])
def test_slow_lap_factor_none_or_off_disables(factor: str | None) -> None:
    """slow_lap_factor=None (or "off") exports no slow lap and records nothing."""
    cap = capture(trace_every=0, slow_lap_factor=factor)
    for _ in range(12):
        _step(cap)
    assert cap.lt._engine.slow is None
    _step(cap, decoder_s=3.0)
    assert cap.lt._engine.state().record is None
    cap.lt.shutdown()
    assert cap.finished_spans() == []


@pytest.mark.parametrize(
    ("environ", "argument", "expected"),
    [
        ({}, "auto", 3.0),
        ({"LOOPTRACE_SLOW_LAP_FACTOR": "2.5"}, "auto", 2.5),
        ({"LOOPTRACE_SLOW_LAP_FACTOR": " OFF "}, "auto", None),
        ({"LOOPTRACE_SLOW_LAP_FACTOR": "off"}, 4, 4.0),
        ({"LOOPTRACE_SLOW_LAP_FACTOR": "2.5"}, None, None),
    ],
)
def test_factor_comes_from_the_argument_then_the_variable_then_the_default(
    environ: dict[str, str], argument: Any, expected: float | None
) -> None:
    """An explicit factor or None wins; "auto" reads LOOPTRACE_SLOW_LAP_FACTOR, else 3."""
    assert slow_lap_factor(argument, environ) == expected


@pytest.mark.parametrize(
    ("environ", "argument", "message"),
    [
        ({"LOOPTRACE_SLOW_LAP_FACTOR": "fast"}, "auto", "LOOPTRACE_SLOW_LAP_FACTOR: expected"),
        ({"LOOPTRACE_SLOW_LAP_FACTOR": "1"}, "auto", "LOOPTRACE_SLOW_LAP_FACTOR: .* above 1"),
        ({}, 0.5, "slow_lap_factor: expected a number above 1 or 'off', got 0.5"),
        ({}, float("inf"), "slow_lap_factor: expected a number above 1"),
        ({}, True, "slow_lap_factor: expected a number, None, 'off' or 'auto', got True"),
        ({}, "3", "slow_lap_factor: expected a number, None, 'off' or 'auto', got '3'"),
    ],
)
def test_a_bad_factor_is_a_config_error_naming_it(
    environ: dict[str, str], argument: Any, message: str
) -> None:
    """A factor that is no number above 1 is refused, naming the argument or variable."""
    with pytest.raises(ConfigError, match=message):
        slow_lap_factor(argument, environ)


def test_the_variable_reaches_configure(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOOPTRACE_SLOW_LAP_FACTOR=20 leaves a 10x lap untraced; the argument overrides it."""
    monkeypatch.setenv("LOOPTRACE_SLOW_LAP_FACTOR", "20")
    for argument, exported in (("auto", False), (5.0, True)):
        cap = capture(trace_every=0, slow_lap_factor=argument)
        for _ in range(12):
            _step(cap)
        _step(cap, decoder_s=2.75)
        cap.lt.shutdown()
        assert bool(cap.finished_spans()) is exported


def test_the_rate_cap_bounds_a_loop_with_many_slow_laps_and_counts_the_rest() -> None:
    """One step in three 10x slower: BUDGET per window of WINDOW laps traced, the rest counted."""
    cap = capture(trace_every=0)
    laps = 400
    slow = [i % 3 == 2 for i in range(laps)]
    for is_slow in slow:
        _step(cap, decoder_s=2.75 if is_slow else 0.05)
    cap.lt.shutdown()  # exports the last, unfinished window's candidates too
    lap_spans = [s for s in cap.finished_spans() if s.name == "training"]
    judged = sum(slow[MIN_LAPS:])
    suppressed = cap.lt.health().slow_laps_suppressed
    assert len(lap_spans) + suppressed == judged
    assert len(lap_spans) == BUDGET * -(-laps // WINDOW)
    assert all((s.attributes or {})["looptrace.slow_lap"] == 10.0 for s in lap_spans)


def _slow_laps(cap: Capture) -> list[tuple[int, float]]:
    """Return (step, ratio) of each lap exported for its slowness, in export order."""
    return [
        ((s.attributes or {})["looptrace.step"], (s.attributes or {})["looptrace.slow_lap"])
        for s in cap.finished_spans()
        if "looptrace.slow_lap" in (s.attributes or {})
    ]


def test_noise_in_a_window_does_not_crowd_out_the_slow_evaluation_steps() -> None:
    """4x noise every 5 laps from lap 12, 8x evaluation steps at 35 and 50: both traced.

    A cap that traced the first slow laps it saw spent its credit on the noise before each.
    """
    cap = capture(trace_every=0)
    for step in range(WINDOW + 10):
        if step in {35, 50}:
            _step(cap, evaluate_s=2.1)  # 2.4 s against a median of 0.3 s
        elif step >= 12 and step % 5 == 2 and step < WINDOW:
            _step(cap, decoder_s=0.95)  # 1.2 s
        else:
            _step(cap)
    assert _slow_laps(cap) == [(22, 4.0), (35, 8.0), (50, 8.0)]  # exported as the window ends
    assert cap.lt.health().slow_laps_suppressed == 9
    cap.lt.shutdown()
    assert len(_slow_laps(cap)) == 3


def test_a_slower_candidate_replaces_the_least_slow_one_of_its_window() -> None:
    """A full budget of 4x laps, then a 10x lap: it takes the place of the first 4x lap."""
    cap = capture(trace_every=0)
    for step in range(30):
        if step in {12, 13, 14}:
            _step(cap, decoder_s=0.95)
        elif step == 20:
            _step(cap, decoder_s=2.75)
        else:
            _step(cap)
    cap.lt.shutdown()
    assert _slow_laps(cap) == [(13, 4.0), (14, 4.0), (20, 10.0)]
    assert cap.lt.health().slow_laps_suppressed == 1


def test_an_evaluation_step_is_judged_against_evaluation_steps() -> None:
    """Regular 8x evaluation steps stop being slow once 5 were seen; a 5x one of them is not.

    A slow usual step is still judged against usual steps.
    """
    cap = capture(trace_every=0)
    evaluations = []
    for step in range(WINDOW + 10):
        if step in {64}:
            _step(cap, evaluate_s=11.7)  # 12 s: 40x a usual step, 5x an evaluation step
        elif step == 66:
            _step(cap, decoder_s=2.75)  # 3 s: 10x a usual step
        elif step % 4 == 3 and (12 <= step < 44 or step == 68):
            evaluations.append(step)
            _step(cap, evaluate_s=2.1)  # 2.4 s: 8x a usual step
        else:
            _step(cap)
    cap.lt.shutdown()
    first = evaluations[:5]  # judged against usual steps until 5 were seen; 3 fit the budget
    assert _slow_laps(cap) == [*[(step, 8.0) for step in first[:3]], (64, 5.0), (66, 10.0)]
    assert cap.lt.health().slow_laps_suppressed == 2


def test_a_threads_last_candidates_are_exported_when_it_exits() -> None:
    """A slow lap in a thread that ends before its window does: exported at the next reset."""
    cap = capture(trace_every=0)
    worker = threading.Thread(
        target=lambda: [_step(cap, decoder_s=d) for d in [0.05] * 12 + [2.75]]
    )
    worker.start()
    worker.join(timeout=30)
    assert cap.finished_spans() == []
    cap.lt.reset()  # closes what the exited thread left
    assert _slow_laps(cap) == [(12, 10.0)]
    cap.lt.shutdown()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_export_its_parents_candidates() -> None:
    """A slow lap pending at fork is exported by the parent only, not again by the child."""
    cap = capture(trace_every=0)
    for _ in range(12):
        _step(cap)
    _step(cap, decoder_s=2.75)
    pid = os.fork()
    if pid == 0:  # the child: its shutdown must export nothing
        code = 1
        try:
            cap.lt.shutdown()
            code = 0 if cap.finished_spans() == [] else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    cap.lt.shutdown()
    assert _slow_laps(cap) == [(12, 10.0)]


def test_nothing_is_recorded_while_nothing_reads_spans() -> None:
    """With no processor but looptrace's the record stays empty; once one is added it runs."""
    provider = TracerProvider()
    lt = looptrace.configure(
        tracer_provider=provider, trace_every=0, rank=RankInfo(), clock=FakeClock(start_s=0.0)
    )
    train = lt.timer("training")
    state = lt._engine.state()
    for _ in range(20):
        train.record("data")
        train.record("forward")
        assert (state.record, state.watched) == (None, [])
        train.record()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    train.record()  # the next lap is watched and recorded
    train.record("data")
    train.record("forward")
    assert state.record is not None
    assert [(entry[0].name, entry[3]) for entry in entries_of(state.record)] == [("data", None)]
    lt.shutdown()


def test_a_traced_lap_is_watched_but_not_recorded() -> None:
    """A sampled lap keeps the median current but its sections are spans, not a record."""
    cap = capture(trace_every=1)
    train = cap.lt.timer("training")
    train.record("data")
    state = cap.lt._engine.state()
    assert (state.record, len(state.watched), state.recording) == (None, 1, [])


def test_other_outermost_laps_are_not_in_the_slow_laps_trace() -> None:
    """Only the lap's subtree is exported: another outermost timer's laps inside it are not."""
    cap = capture(trace_every=0)
    for _ in range(12):
        _step(cap)
    infer = cap.lt.timer("inference")
    train = cap.lt.timer("training")
    train.record("data")
    infer.record("predict")  # an outermost timer of its own, still running at the end
    cap.clock.advance(3.0)
    infer.record()
    infer.record("predict")
    train.record()
    cap.lt.shutdown()
    paths = {(s.attributes or {})["looptrace.path"] for s in cap.finished_spans()}
    assert paths == {"root.training", "root.training.data"}


def test_an_error_in_a_slow_lap_is_an_error_span() -> None:
    """A section left by an exception is exported with status ERROR and the exception event."""
    cap = capture(trace_every=0)
    for _ in range(12):
        _step(cap)
    train = cap.lt.timer("training")
    with pytest.raises(KeyError), train.section("eval"):
        cap.clock.advance(3.0)
        raise KeyError("batch")
    train.record()
    cap.lt.shutdown()
    (evaluation, _lap) = cap.finished_spans()
    assert (evaluation.name, evaluation.status.status_code.name) == ("eval", "ERROR")
    assert evaluation.status.description == "KeyError: 'batch'"
    assert [event.name for event in evaluation.events] == ["exception"]


def test_a_lap_with_too_many_sections_stops_recording() -> None:
    """A lap that never ends cannot grow memory: past MAX_RECORD entries recording stops."""
    cap = capture(trace_every=0)
    for _ in range(12):
        _step(cap)
    train = cap.lt.timer("training")
    state = cap.lt._engine.state()
    for index in range(MAX_RECORD + 3 * FOLD_AT):  # a merge every FOLD_AT sections
        train.record("a" if index % 2 else "b")
        kept = len(state.record) if state.record is not None else 0
        assert kept <= (MAX_RECORD + 2 * FOLD_AT) * ENTRY_ITEMS
    assert (state.record, state.recording) == (None, [])
    cap.clock.advance(10.0)
    train.record()
    cap.lt.shutdown()
    assert cap.finished_spans() == []  # slow, but no longer recorded


def test_a_lap_cut_by_shutdown_is_not_judged() -> None:
    """A running lap that shutdown() cuts is not exported as slow (it is cut, not slow)."""
    cap = capture(trace_every=0)
    for _ in range(12):
        _step(cap)
    cap.lt.timer("training").record("data")
    cap.clock.advance(10.0)
    cap.lt.shutdown()
    assert cap.finished_spans() == []


def _entry(name: str, start: int, end: int, timers: dict[str, Any]) -> Entry:
    return (timers[name], start, end, None)


def test_nesting_is_rebuilt_from_ancestry_and_time() -> None:
    """Recursion nests, a zero-length earlier sibling stays a sibling, b without a joins t."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("training")
    timers = {"t": train, "a": train.timer("a"), "b": train.timer("a").timer("b")}
    entries = [
        _entry("b", 1, 1, timers),  # a zero-length b, then a later one at the same instant
        _entry("b", 1, 2, timers),
        _entry("a", 3, 4, timers),  # recursion: a inside a
        _entry("a", 2, 5, timers),
        _entry("b", 0, 9, timers),  # b while no a ran: under its nearest ancestor, the lap
        _entry("t", 0, 9, timers),
    ]
    assert nest(entries) == [[], [], [], [2], [], [0, 1, 3, 4]]
    cap.lt.shutdown()


def test_a_section_entered_inside_a_siblings_entry_is_rebuilt_inside_it() -> None:
    """A section entered inside an open entry of its sibling nests in it, as when traced."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("training")
    timers = {"t": train, "a": train.timer("a"), "b": train.timer("b"), "c": train.timer("c")}
    entries = [
        _entry("b", 0, 0, timers),  # zero-length, as a began: an earlier sibling
        _entry("b", 1, 3, timers),  # inside a: nested
        _entry("a", 0, 7, timers),
        _entry("c", 7, 9, timers),  # after a: a sibling
        _entry("t", 0, 9, timers),
    ]
    assert nest(entries) == [[], [], [1], [], [0, 2, 3]]
    cap.lt.shutdown()


def _decorated_calls(cap: Capture) -> list[tuple[Any, ...]]:
    """Run 12 steps of a() calling b(), then a slow one; return the slow step's spans."""
    train = cap.lt.timer("training")

    @train.timed()
    def b(seconds: float) -> None:
        cap.clock.advance(seconds)

    @train.timed()
    def a(seconds: float) -> None:
        cap.clock.advance(seconds)
        b(seconds)
        cap.clock.advance(seconds)

    for seconds in [0.1] * 12 + [2.0]:
        train.record()
        a(seconds)
    train.stop()
    cap.lt.shutdown()
    return [span for span in _tree(cap) if span[2] == 12]


def test_a_slow_lap_nests_a_decorated_call_in_the_one_that_made_it() -> None:
    """A slow lap's exported spans nest b() in a() as tracing the step does."""
    traced = _decorated_calls(capture(trace_every=1, slow_lap_factor=None))
    assert traced == _decorated_calls(capture(trace_every=0, slow_lap_factor=2.0))
    assert traced == [
        ("b", "a", 12, 5.6, 7.6),
        ("a", "training", 12, 3.6, 9.6),
        ("training", None, 12, 3.6, 9.6),
    ]


@settings(max_examples=examples(60), deadline=None)
@given(operations)
def test_exporting_slow_laps_never_changes_the_statistics(ops: list[tuple[str, Any, Any]]) -> None:
    """With slow laps exported (factor just above 1) the windows equal those with it off."""
    lap: list[tuple[str, Any, Any]] = [("record", "training", "data"), ("advance", 10, None)]
    warm_up = [*lap, ("record", "training", None)] * 12
    slow_end = [("record", "training", None), ("advance", 10**7, None)] * 2  # 10 s laps
    played = [*warm_up, *ops, *slow_end]
    exported = capture(trace_every=0, slow_lap_factor=1.0001)
    assert play(exported, played) == play(capture(trace_every=0, slow_lap_factor=None), played)
    exported.lt.shutdown()
    assert exported.finished_spans() or exported.lt.health().slow_laps_suppressed


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=12, max_size=40), st.integers(0, 40))
def test_slow_laps_of_random_loops_leave_the_statistics_alone(
    decoder_us: list[int], reset_at: int
) -> None:
    """Random step times, a reset, a last step 10x the slowest: the same windows either way."""
    windows = []
    caps = [capture(trace_every=0, slow_lap_factor=factor) for factor in (1.5, None)]
    for cap in caps:
        found = []
        slowest_s = max(decoder_us) / 1e4 + 0.25  # the step around the decoder takes 0.25 s
        for index, micros in enumerate([*decoder_us, round(1e5 * slowest_s)]):
            _step(cap, decoder_s=micros / 1e4)
            if index == reset_at:
                found.append(window_data(cap.lt.reset()))
        found.append(window_data(cap.lt.reset()))
        cap.lt.shutdown()
        windows.append(found)
    assert windows[0] == windows[1]
    seen = [bool(cap.finished_spans() or cap.lt.health().slow_laps_suppressed) for cap in caps]
    assert seen == [True, False]
