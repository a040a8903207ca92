"""Timer calls take no lock: a reset claims a thread's state, and the two never overlap."""

from __future__ import annotations

import threading
import time

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from looptrace._base.attributes import THREAD_ID
from looptrace._core.threadkey import thread_key
from looptrace.testing import capture

from .helpers.timing import PreemptingClock, Worker, counts, totals

WAIT_S = 0.2  # how long a blocked thread is watched to stay blocked


def test_reset_waits_for_a_timer_call_under_way() -> None:
    """A reset from another thread waits until the lap it found in progress has ended."""
    clock = PreemptingClock()
    cap = capture(trace_every=0, clock=clock)
    train = cap.lt.timer("training")
    blocked: list[bool] = []
    results: list[tuple[dict[str, float], dict[str, int]]] = []

    def reset() -> None:
        snapshot = cap.lt.reset()
        results.append((totals(snapshot), {p: n for p, n in counts(snapshot).items() if n}))

    resetter = threading.Thread(target=reset)

    def inside_the_call() -> None:  # runs in the worker, inside record("b")
        resetter.start()
        resetter.join(WAIT_S)
        blocked.append(resetter.is_alive())

    def work() -> None:
        train.record("a")
        clock.advance(1.0)
        # Another thread's call, then its exit, leave no state found last: record("b") goes
        # the general way, which reads the clock inside the call (for the fast path, see below).
        other = threading.Thread(target=lambda: train.running)
        other.start()
        other.join()
        clock.on_read = inside_the_call
        train.record("b")

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    resetter.join()
    assert blocked == [True]
    # The switch from a to b ended before the cut: a is counted, b runs on past it.
    assert results == [({"root.training": 1.0, "root.training.a": 1.0}, {"root.training.a": 1})]


@pytest.mark.parametrize("call", ["record", "enter", "exit"])
def test_a_reset_between_a_fast_calls_reading_and_its_start_makes_it_read_again(call: str) -> None:
    """A call's one-call reading precedes the call: a reset cut after it sends it back to the clock.

    The reset does not wait (the call is not under way yet), and the call, which would end or
    start an interval at an instant before the cut, ends or starts it at a new reading instead.
    """
    clock = PreemptingClock()
    cap = capture(trace_every=0, clock=clock)
    train = cap.lt.timer("training")
    section = train.section("b")
    cuts: list[dict[str, float]] = []

    def preempted() -> None:  # inside the clock reading of the call under test
        clock.advance(0.5)
        resetter = threading.Thread(target=lambda: cuts.append(totals(cap.lt.reset())))
        resetter.start()
        resetter.join(10)
        assert not resetter.is_alive()

    train.record("a")
    with section:  # the section's interval is spare from now on: its entry takes the fast path
        pass
    if call == "exit":
        with section:
            clock.advance(1.0)
            clock.on_read = preempted
    else:
        clock.advance(1.0)
        clock.on_read = preempted
        if call == "record":
            train.record("a")
        else:
            with section:
                clock.advance(1.0)
    clock.advance(1.0)
    last = totals(cap.lt.reset())
    assert clock.on_read is None  # the reading under test was taken
    assert cuts == [
        {"root.training": 1.5, "root.training.a": 0.0, "root.training.b": 1.5}
        if call == "exit"
        else {"root.training": 1.5, "root.training.a": 0.0, "root.training.b": 0.0}
    ]
    # Nothing before the cut at 1.5 counts again, and nothing after it goes missing.
    assert (
        last
        == {
            "record": {"root.training": 1.0, "root.training.a": 1.0},
            "enter": {"root.training": 2.0, "root.training.b": 1.0},
            "exit": {"root.training": 1.0, "root.training.b": 0.0},
        }[call]
    )


def test_a_timer_call_waits_while_its_state_is_claimed() -> None:
    """A thread whose state another thread claims waits in its next call until unclaimed."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("training")
    started, proceed = threading.Event(), threading.Event()
    done = threading.Event()

    def work() -> None:
        train.record("a")
        started.set()
        proceed.wait()
        train.record("b")
        done.set()
        train.stop()

    worker = threading.Thread(target=work)
    worker.start()
    started.wait()
    (state,) = [s for s in cap.lt._engine.states.all() if s.thread[THREAD_ID] == worker.ident]
    state.claim()
    try:
        proceed.set()
        assert not done.wait(WAIT_S)
    finally:
        state.unclaim()
    assert done.wait(10)
    worker.join()
    assert totals(cap.lt.reset()) == {
        "root.training": 0.0,
        "root.training.a": 0.0,
        "root.training.b": 0.0,
    }


def test_a_thread_that_reuses_an_exited_threads_ident_starts_afresh() -> None:
    """The state found last is dropped at thread exit, so a reused ident finds nothing running."""
    cap = capture(trace_every=0)
    engine = cap.lt._engine
    train = cap.lt.timer("training")
    seen: list[tuple[int, object, bool]] = []

    def first() -> None:
        train.record("a")  # left running: the thread exits inside a lap
        seen.append((threading.get_ident(), engine.states.last, True))

    def second() -> None:
        seen.append((threading.get_ident(), engine.state(), train.running))

    for _ in range(50):  # the OS hands an exited thread's ident out again, mostly at once
        seen.clear()
        for target in (first, second):
            thread = threading.Thread(target=target)
            thread.start()
            thread.join()
            time.sleep(0.001)  # until the OS thread is gone and its ident free
        if seen[0][0] == seen[1][0]:
            break
    assert seen[0][0] == seen[1][0], "no ident was reused"
    assert seen[1][1] is not seen[0][1]
    assert seen[1][2] is False


def test_a_thread_state_stops_being_the_last_found_when_its_thread_exits() -> None:
    """The state found last is dropped inside the exiting thread, before its key can be reused.

    A key is the address of the thread's state dictionary (compiled core) or its ident: both
    can be handed to a new thread once the old one is gone.
    """
    cap = capture(trace_every=0)
    engine = cap.lt._engine
    train = cap.lt.timer("training")
    seen: list[tuple[int, object]] = []

    def work() -> None:
        train.record("a")
        seen.append((thread_key(), engine.states.last))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    ((key, state),) = seen
    assert state is not None
    assert state.key == key
    assert engine.states.last is None  # (the main thread made no timer call)
    assert key != thread_key()


class Spans(SpanProcessor):
    """Remembers which spans started and which ended; on_start blocks while `hold` is clear."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.ended: list[str] = []
        self.blocking = False
        self.entered = threading.Event()
        self.hold = threading.Event()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Note the span; block until `hold` is set if `blocking`."""
        self.started.append(span.name)
        if self.blocking:
            self.blocking = False
            self.entered.set()
            self.hold.wait(30)

    def on_end(self, span: ReadableSpan) -> None:
        """Note the span."""
        self.ended.append(span.name)

    def unended(self) -> list[str]:
        """Return the names of the spans started and not ended."""
        left = list(self.started)
        for name in self.ended:
            left.remove(name)
        return left


def test_a_call_preempted_past_its_closed_check_starts_nothing_after_shutdown() -> None:
    """A lap whose call read the clock before shutdown() and goes on after it does nothing.

    shutdown() on another thread ends the worker's running lap and section between the
    call's reading and its start; the call then starts no lap, so no span is left unended.
    """
    clock = PreemptingClock()
    cap = capture(clock=clock)
    spans = Spans()
    cap.tracer_provider.add_span_processor(spans)
    train = cap.lt.timer("training")
    worker = Worker()
    worker.run(lambda: train.record("a"))

    def shut_down() -> None:  # inside the worker's clock reading of record()
        closer = threading.Thread(target=cap.lt.shutdown)
        closer.start()
        closer.join(10)
        assert not closer.is_alive()

    clock.advance(1.0)
    clock.on_read = shut_down
    worker.run(train.record)
    running: list[bool] = []
    worker.run(lambda: running.append(train.running))
    worker.close()
    assert clock.on_read is None  # the reading under test was taken
    assert (running, spans.unended(), sorted(spans.ended)) == ([False], [], ["a", "training"])


def test_shutdown_does_not_wait_for_a_blocked_timer_call() -> None:
    """shutdown() gives up on a call that outlasts its bound; its thread ends its spans later."""
    cap = capture()
    cap.lt._engine.windows.claim_timeout_s = 0.05
    spans = Spans()
    cap.tracer_provider.add_span_processor(spans)
    train = cap.lt.timer("training")
    worker = Worker()
    worker.run(lambda: train.record("a"))
    spans.blocking = True
    blocked = threading.Thread(target=lambda: worker.run(lambda: train.record("b")))
    blocked.start()
    assert spans.entered.wait(10)  # the worker is inside record("b"), its state busy
    closer = threading.Thread(target=cap.lt.shutdown)
    closer.start()
    closer.join(10)
    finished = not closer.is_alive()
    spans.hold.set()
    blocked.join(10)
    assert finished  # while record("b") was still blocked
    assert sorted(spans.unended()) == ["b", "training"]
    worker.run(train.record)  # refused: ends what the thread left running, as cut
    worker.close()
    assert (spans.unended(), sorted(spans.ended)) == ([], ["a", "b", "training"])
    assert cap.lt.health().internal_errors == 1  # the wait given up, counted and logged


def test_reset_does_not_wait_for_a_blocked_timer_call() -> None:
    """A reset gives up on a call that outlasts the bound; that thread's time goes on."""
    cap = capture()
    cap.lt._engine.windows.claim_timeout_s = 0.05
    spans = Spans()
    cap.tracer_provider.add_span_processor(spans)
    train = cap.lt.timer("training")
    worker = Worker()
    worker.run(lambda: train.record("a"))
    cap.clock.advance(1.0)
    spans.blocking = True
    blocked = threading.Thread(target=lambda: worker.run(lambda: train.record("b")))
    blocked.start()
    assert spans.entered.wait(10)
    windows: list[dict[str, float]] = []
    resetter = threading.Thread(target=lambda: windows.append(totals(cap.lt.reset())))
    resetter.start()
    resetter.join(10)
    finished = not resetter.is_alive()
    spans.hold.set()
    blocked.join(10)
    cap.clock.advance(1.0)
    worker.run(train.stop)
    worker.close()
    windows.append(totals(cap.lt.reset()))
    assert finished
    # The first window left the worker out; the next one has all its time, once.
    assert windows == [
        {},
        {"root.training": 2.0, "root.training.a": 1.0, "root.training.b": 1.0},
    ]
