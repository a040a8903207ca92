"""Lap semantics of timers and sections (docs/architecture.md, timer semantics 1-4 and 6)."""

from __future__ import annotations

import contextlib
import math
import pickle

import pytest

import looptrace
from looptrace.testing import Capture, capture

from .helpers.timing import counts, totals


def test_record_laps_a_running_timer(cap: Capture) -> None:
    """record() on a running timer closes one measurement and starts the next at once."""
    train = cap.lt.timer("training")
    train.record()
    cap.clock.advance(1.0)
    train.record()
    cap.clock.advance(2.0)
    train.record()
    snap = cap.lt.reset()
    assert counts(snap) == {"root.training": 2}
    stats = snap["root.training"]
    assert (stats.total, stats.min, stats.max, stats.mean) == (3.0, 1.0, 2.0, 1.5)


def test_record_name_switches_siblings(cap: Capture) -> None:
    """record("b") ends the running sibling "a" and starts "b" at the same instant."""
    train = cap.lt.timer("training")
    train.record("a")
    cap.clock.advance(0.25)
    train.record("b")
    cap.clock.advance(0.5)
    train.record("a")
    cap.clock.advance(0.125)
    train.stop()
    snap = cap.lt.reset()
    assert totals(snap) == {
        "root.training": 0.875,
        "root.training.a": 0.375,
        "root.training.b": 0.5,
    }
    assert counts(snap) == {"root.training": 1, "root.training.a": 2, "root.training.b": 1}


def test_record_name_laps_the_running_section(cap: Capture) -> None:
    """record("a") while "a" runs ends that interval and starts a new one."""
    train = cap.lt.timer("training")
    train.record("a")
    cap.clock.advance(1.0)
    train.record("a")
    cap.clock.advance(3.0)
    train.stop()
    assert counts(cap.lt.reset()) == {"root.training": 1, "root.training.a": 2}


def test_lap_of_parent_ends_descendants_innermost_first(cap: Capture) -> None:
    """A parent lap ends every running descendant at the same instant, innermost first."""
    train = cap.lt.timer("training")
    forward = train.timer("forward")
    train.record("forward")
    forward.record("encoder")
    cap.clock.advance(0.5)
    forward.record("decoder")
    cap.clock.advance(0.25)
    train.record()
    ended = [span.name for span in cap.finished_spans()]
    assert ended == ["encoder", "decoder", "forward", "training"]
    assert [s["end"] for s in cap.span_tree()] == [0.5, 0.75, 0.75, 0.75]
    assert not forward.running
    assert train.running


def test_stop_ends_timer_and_its_sections(cap: Capture) -> None:
    """stop() ends the running interval and every running section, starting nothing."""
    train = cap.lt.timer("training")
    train.record("data")
    cap.clock.advance(2.0)
    train.stop()
    assert not train.running
    assert not train.timer("data").running
    assert totals(cap.lt.reset()) == {"root.training": 2.0, "root.training.data": 2.0}


def test_self_time_excludes_direct_children(cap: Capture) -> None:
    """Self time is the duration minus the time spent in direct children."""
    train = cap.lt.timer("training")
    train.record("forward")
    cap.clock.advance(1.0)
    train.timer("forward").record("encoder")
    cap.clock.advance(2.0)
    train.stop()
    snap = cap.lt.reset()
    assert {p: s.self_time for p, s in snap.items()} == {
        "root.training": 0.0,
        "root.training.forward": 1.0,
        "root.training.forward.encoder": 2.0,
    }


def test_independent_timers_do_not_close_each_other(cap: Capture) -> None:
    """Timers from lt.timer() are independent; root.record(name) makes them switch."""
    train, evaluate = cap.lt.timer("training"), cap.lt.timer("eval")
    train.record()
    evaluate.record()
    cap.clock.advance(1.0)
    assert train.running and evaluate.running
    assert not cap.lt.root.running
    cap.lt.root.record("training")
    cap.lt.root.record("eval")
    assert evaluate.running
    assert not train.running


def test_reset_splits_running_sections(cap: Capture) -> None:
    """reset() counts the part before the cut and keeps the section running into the next."""
    train = cap.lt.timer("training")
    train.record("forward")
    cap.clock.advance(3.0)
    first = cap.lt.reset()
    cap.clock.advance(1.0)
    train.stop()
    second = cap.lt.reset()
    assert totals(first) == {"root.training": 3.0, "root.training.forward": 3.0}
    assert totals(second) == {"root.training": 1.0, "root.training.forward": 1.0}
    # Counted once, whole, in the window where it ends.
    assert counts(first) == {"root.training": 0, "root.training.forward": 0}
    assert counts(second) == {"root.training": 1, "root.training.forward": 1}
    assert (second["root.training.forward"].min, second["root.training.forward"].max) == (4, 4)
    assert math.isnan(first["root.training"].mean)
    assert second["root.training"].self_time == 0.0


def test_windows_of_the_readme_loop_count_exactly_their_laps(cap: Capture) -> None:
    """record() then reset() every 100 steps: each window counts 100 laps, min is a real lap."""
    train = cap.lt.timer("training")
    windows = []
    for step in range(300):
        train.record("forward")
        cap.clock.advance(0.01)
        train.record()
        cap.clock.advance(0.00001)  # the sliver between the lap and the reset
        if step % 100 == 99:
            windows.append(cap.lt.reset())
    assert [counts(w) for w in windows] == [
        {"root.training": 100, "root.training.forward": 100}
    ] * 3
    assert [round(w["root.training"].min, 6) for w in windows] == [0.01, 0.01001, 0.01001]
    assert round(sum(w["root.training"].total for w in windows), 9) == 3.003


def test_second_reset_without_activity_is_empty(cap: Capture) -> None:
    """A reset right after another, with nothing recorded and no time passing, is empty."""
    train = cap.lt.timer("training")
    train.record("forward")
    cap.clock.advance(1.0)
    assert len(cap.lt.reset()) == 2
    assert dict(cap.lt.reset()) == {}


def test_reset_window_timestamps(cap: Capture) -> None:
    """A snapshot carries the epoch-ns bounds of its window."""
    cap.clock.advance(2.0)
    first = cap.lt.reset()
    cap.clock.advance(3.0)
    second = cap.lt.reset()
    assert second.start_ns == first.end_ns
    assert second.end_ns - second.start_ns == 3_000_000_000


def test_section_enters_like_record_and_exits_only_itself(cap: Capture) -> None:
    """section() closes the running sibling, and on exit ends itself while the timer runs on."""
    train = cap.lt.timer("training")
    train.record("backward")
    cap.clock.advance(1.0)
    with train.section("optimizer"):
        assert not train.timer("backward").running
        cap.clock.advance(0.5)
    assert train.running
    assert not train.timer("optimizer").running
    cap.clock.advance(0.25)
    train.stop()
    assert totals(cap.lt.reset()) == {
        "root.training": 1.75,
        "root.training.backward": 1.0,
        "root.training.optimizer": 0.5,
    }


def test_section_exception_records_error_and_reraises(cap: Capture) -> None:
    """An exception in section() records the duration, marks the span ERROR and re-raises."""
    train = cap.lt.timer("training")
    train.record()
    with pytest.raises(RuntimeError, match="boom"), train.section("step"):
        cap.clock.advance(0.5)
        raise RuntimeError("boom")
    train.record("after")
    cap.clock.advance(0.25)
    train.stop()
    snap = cap.lt.reset()
    assert (snap["root.training.step"].count, snap["root.training.step"].errors) == (1, 1)
    assert snap["root.training.step"].total == 0.5
    tree = cap.span_tree()
    assert [(s["name"], s["parent"], s["status"]) for s in tree] == [
        ("step", "training", "ERROR"),
        ("after", "training", "UNSET"),
        ("training", None, "UNSET"),
    ]
    step_span = cap.finished_spans()[0]
    assert [e.name for e in step_span.events] == ["exception"]


def test_an_untraced_section_that_raises_counts_its_error(cap: Capture) -> None:
    """Untraced, a section left by an exception (the in-place exit) counts it as an error."""
    lt = capture(trace_every=0, clock=cap.clock).lt
    train = lt.timer("training")
    train.record()
    step = train.section("step")
    for fail in (False, True):
        with contextlib.suppress(RuntimeError), step:
            cap.clock.advance(0.5)
            if fail:
                raise RuntimeError("boom")
    train.stop()
    snap = lt.reset()
    assert (snap["root.training.step"].count, snap["root.training.step"].errors) == (2, 1)
    assert snap["root.training.step"].total == 1.0


def test_a_section_entered_again_in_place_forgets_its_last_childrens_time(cap: Capture) -> None:
    """Untraced, a loop's section restarts its interval in place, without its children's time."""
    lt = capture(trace_every=0, clock=cap.clock).lt
    train = lt.timer("training")
    forward = train.section("forward")
    encoder = train.timer("forward").section("encoder")
    for nested in (True, False, False):
        train.record()
        with forward:
            cap.clock.advance(1.0)
            if nested:
                with encoder:
                    cap.clock.advance(2.0)
    train.stop()
    snap = lt.reset()
    stats = snap["root.training.forward"]
    assert (stats.count, stats.total, stats.self_time) == (3, 5.0, 3.0)
    assert (stats.min, stats.max) == (1.0, 3.0)


def test_a_timer_that_ran_as_its_own_step_enters_later_as_a_plain_section(cap: Capture) -> None:
    """An interval kept from a step of a never-lapped timer is no step when reused in place."""
    lt = capture(trace_every=0, clock=cap.clock).lt
    train = lt.timer("training")
    forward = train.timer("forward")
    with forward.section("encoder"):  # training stopped: forward's interval is its own step
        cap.clock.advance(1.0)
    train.record()
    with train.section("forward"):
        with forward.section("encoder"):
            cap.clock.advance(2.0)
        cap.clock.advance(1.0)
    train.stop()
    snap = lt.reset()
    assert (snap["root.training.forward"].count, snap["root.training.forward"].total) == (2, 4.0)
    assert snap["root.training"].total == 3.0
    assert lt.health().misuse == 0


def test_a_with_block_binds_no_method_of_its_section(cap: Capture) -> None:
    """`with` finds a section's __enter__/__exit__ bound already, and gets the section back."""
    train = cap.lt.timer("training")
    step = train.section("step")
    assert step.__enter__ is step.__enter__
    assert step.__exit__ is step.__exit__
    assert isinstance(step, looptrace.Section)
    assert type(step) is not type(train.section("other"))
    assert repr(step) == "Section('root.training.step')"
    with step as entered:
        assert entered is step
        assert train.timer("step").running
    assert not train.timer("step").running


def test_a_section_entered_in_the_language_references_form(cap: Capture) -> None:
    """`type(m).__enter__(m)` / `type(m).__exit__(m, ...)` (mypyc's `with`) enter and leave."""
    train = cap.lt.timer("training")
    train.record()
    step = train.section("step")
    for error in (None, RuntimeError("boom")):
        assert type(step).__enter__(step) is step
        cap.clock.advance(0.5)
        type(step).__exit__(step, type(error) if error else None, error, None)
    train.stop()
    snap = cap.lt.reset()
    assert (snap["root.training.step"].count, snap["root.training.step"].errors) == (2, 1)
    assert snap["root.training.step"].total == 1.0
    assert cap.lt.health().misuse == 0


def test_section_ended_by_a_switch_inside_the_block(cap: Capture) -> None:
    """A sibling switch inside a with-block ends the section; leaving the block is then a no-op."""
    train = cap.lt.timer("training")
    with train.section("a"):
        cap.clock.advance(1.0)
        train.record("b")
        cap.clock.advance(2.0)
    assert train.timer("b").running
    train.stop()
    assert counts(cap.lt.reset()) == {
        "root.training": 1,
        "root.training.a": 1,
        "root.training.b": 1,
    }
    assert cap.lt.health().misuse == 0


def test_section_start_stop_form(cap: Capture) -> None:
    """A section object also works by explicit start() and stop()."""
    train = cap.lt.timer("training")
    opt = train.section("optimizer")
    opt.start()
    cap.clock.advance(0.5)
    opt.stop()
    train.stop()
    assert totals(cap.lt.reset()) == {"root.training": 0.5, "root.training.optimizer": 0.5}


def test_timed_decorator_default_and_explicit_names(cap: Capture) -> None:
    """@timed() names the section after the function; @timed("x") uses x; one count per call."""
    train = cap.lt.timer("training")

    @train.timed()
    def load_batch() -> int:
        cap.clock.advance(0.5)
        return 7

    @train.timed("opt")
    def step() -> None:
        cap.clock.advance(0.25)

    assert load_batch() == 7
    step()
    load_batch()
    assert not train.running  # never lapped: each call is a step of its own
    assert counts(cap.lt.reset()) == {
        "root.training": 3,
        "root.training.load_batch": 2,
        "root.training.opt": 1,
    }


def test_recursive_decorated_function_is_measured_per_call(cap: Capture) -> None:
    """Recursion nests intervals under one path: one count per call, self time per level."""
    train = cap.lt.timer("training")

    @train.timed("fib")
    def countdown(n: int) -> None:
        cap.clock.advance(1.0)
        if n > 0:
            countdown(n - 1)

    countdown(3)
    snap = cap.lt.reset()
    fib = snap["root.training.fib"]
    assert (fib.count, fib.total, fib.self_time, fib.min, fib.max) == (4, 10.0, 4.0, 1.0, 4.0)
    parents = [(s["name"], s["parent"]) for s in cap.span_tree()]
    assert parents == [("fib", "fib")] * 3 + [("fib", None)]  # the never-lapped step's root


def _stats(snap: looptrace.Snapshot) -> dict[str, tuple[int, float, float]]:
    return {path: (s.count, round(s.total, 9), round(s.self_time, 9)) for path, s in snap.items()}


@pytest.mark.parametrize("lapped", [False, True])
def test_a_decorated_function_called_from_another_nests_in_it(cap: Capture, lapped: bool) -> None:
    """a() (7 s) calling b() (2 s) on one timer: b is a child of a, and no time is lost."""
    train = cap.lt.timer("training")

    @train.timed()
    def b() -> None:
        cap.clock.advance(2.0)

    @train.timed()
    def a() -> None:
        cap.clock.advance(1.0)
        b()
        cap.clock.advance(4.0)

    if lapped:
        train.record()
    a()
    if lapped:
        train.stop()
    assert not train.running
    assert _stats(cap.lt.reset()) == {
        "root.training": (1, 7.0, 0.0),
        "root.training.a": (1, 7.0, 5.0),
        "root.training.b": (1, 2.0, 2.0),
    }
    laps = [("a", "training", 0.0, 7.0), ("training", None, 0.0, 7.0)]
    step_of_a_never_lapped_timer = [("a", None, 0.0, 7.0)]  # a's span is the step's root
    assert [(s["name"], s["parent"], s["start"], s["end"]) for s in cap.span_tree()] == [
        ("b", "a", 1.0, 3.0),
        *(laps if lapped else step_of_a_never_lapped_timer),
    ]
    assert cap.lt.health().misuse == 0


def test_nested_with_blocks_of_one_timer_nest(cap: Capture) -> None:
    """Nested `with t.section()` blocks nest, three deep, each inside the innermost running."""
    lt = capture(trace_every=0, clock=cap.clock).lt
    train = lt.timer("training")
    train.record()
    for _ in range(2):  # the second time through, the sections' spare intervals are reused
        with train.section("outer"):
            cap.clock.advance(1.0)
            with train.section("middle"):
                cap.clock.advance(1.0)
                with train.section("inner"):
                    cap.clock.advance(1.0)
                cap.clock.advance(1.0)
            with train.section("after"):  # middle has ended: a sibling of it, inside outer
                cap.clock.advance(1.0)
        cap.clock.advance(1.0)
    train.stop()
    assert _stats(lt.reset()) == {
        "root.training": (1, 12.0, 2.0),
        "root.training.outer": (2, 10.0, 2.0),
        "root.training.middle": (2, 6.0, 4.0),
        "root.training.inner": (2, 2.0, 2.0),
        "root.training.after": (2, 2.0, 2.0),
    }
    assert lt.health().misuse == 0


def test_a_section_entered_inside_an_entry_nests_in_its_running_section(cap: Capture) -> None:
    """Inside a with-block with a section of its own running, a sibling entry nests there."""
    train = cap.lt.timer("training")
    train.record()
    with train.section("step"):
        train.timer("step").record("load")
        cap.clock.advance(1.0)
        with train.section("fetch"):
            cap.clock.advance(2.0)
        cap.clock.advance(3.0)
    train.stop()
    assert _stats(cap.lt.reset()) == {
        "root.training": (1, 6.0, 0.0),
        "root.training.step": (1, 6.0, 0.0),
        "root.training.step.load": (1, 6.0, 4.0),
        "root.training.fetch": (1, 2.0, 2.0),
    }
    parents = {s["name"]: s["parent"] for s in cap.span_tree()}
    assert parents == {"fetch": "load", "load": "step", "step": "training", "training": None}


def test_decorated_function_exception_propagates(cap: Capture) -> None:
    """A decorated function that raises is counted as an error and the exception propagates."""
    train = cap.lt.timer("training")

    @train.timed()
    def fails() -> None:
        cap.clock.advance(1.0)
        raise KeyError("missing")

    with pytest.raises(KeyError):
        fails()
    assert cap.lt.reset()["root.training.fails"].errors == 1


def test_a_timer_refuses_to_be_pickled_and_says_what_to_do(cap: Capture) -> None:
    """Pickling a timer (or a section, or what holds one) is a TimerError saying what to do."""
    train = cap.lt.timer("training")
    train.record("data")
    for held in (train, {"timer": train}, train.section("forward")):
        with pytest.raises(looptrace.TimerError) as raised:
            pickle.dumps(held)
        assert str(raised.value) == (
            "timer 'root.training' cannot be pickled (e.g. into a DataLoader worker started "
            "with 'spawn'): its laps live in this process. Create timers in the worker "
            "instead: call looptrace.configure() there (e.g. in worker_init_fn) and look the "
            "timer up by its name, lt.timer(name); pass the name, not the timer"
        )
    assert train.timer("data").running


class TimedDataset:
    """A map-style dataset that keeps a timer, as a user's dataset might."""

    def __init__(self, timer: looptrace.Timer) -> None:
        self.timer = timer

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return index


@pytest.mark.slow
def test_a_spawn_dataloader_whose_dataset_holds_a_timer_says_what_to_do(cap: Capture) -> None:
    """A real spawn DataLoader over a dataset holding a timer fails with the TimerError."""
    torch_data = pytest.importorskip("torch.utils.data")
    dataset = TimedDataset(cap.lt.timer("training"))
    loader = torch_data.DataLoader(dataset, num_workers=1, multiprocessing_context="spawn")
    with pytest.raises(looptrace.TimerError, match="Create timers in the worker"):
        iter(loader)
