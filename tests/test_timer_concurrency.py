"""Timers under concurrency: threads, resets from other threads, asyncio tasks, recursion."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator

import pytest

from looptrace.testing import Capture, FakeClock, capture

from .helpers.timing import PreemptingClock, Worker, counts, totals


def test_threads_share_a_timer_with_exact_counts() -> None:
    """8 threads x 10,000 sections on one shared timer give exactly 80,000 counts."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("training")
    barrier = threading.Barrier(8)

    def work() -> None:
        barrier.wait()
        for _ in range(10_000):
            train.record("forward")
        train.stop()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts(cap.lt.reset()) == {"root.training": 8, "root.training.forward": 80_000}


def test_reset_from_another_thread_while_recording() -> None:
    """Resets racing with a recording thread neither lose nor double-count sections."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("training")
    done = threading.Event()

    def work() -> None:
        for _ in range(20_000):
            train.record("forward")
            train.record("backward")
        train.stop()
        done.set()

    thread = threading.Thread(target=work)
    thread.start()
    seen: dict[str, int] = {}
    while not done.is_set():
        for path, n in counts(cap.lt.reset()).items():
            seen[path] = seen.get(path, 0) + n
    thread.join()
    for path, n in counts(cap.lt.reset()).items():
        seen[path] = seen.get(path, 0) + n
    # The fake clock never moves, so cuts add nothing: every count is one real section end.
    assert seen == {
        "root.training": 1,
        "root.training.forward": 20_000,
        "root.training.backward": 20_000,
    }


def test_thread_exit_closes_its_running_sections(cap: Capture) -> None:
    """Sections a thread leaves running end when it exits, not in later windows."""
    train = cap.lt.timer("training")

    def work() -> None:
        train.record("forward")
        cap.clock.advance(2.0)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    cap.clock.advance(5.0)
    assert totals(cap.lt.reset()) == {"root.training": 2.0, "root.training.forward": 2.0}
    assert dict(cap.lt.reset()) == {}


def test_section_returns_one_object_per_name(cap: Capture) -> None:
    """train.section(name) is the same object on every call, so loops allocate nothing."""
    train = cap.lt.timer("training")
    assert train.section("optimizer") is train.section("optimizer")
    assert train.section("optimizer") is not train.section("eval")


def test_section_object_shared_by_threads(cap: Capture) -> None:
    """One section object entered by two threads at once keeps their entries apart."""
    train = cap.lt.timer("training")
    section = train.section("io")
    inside = threading.Barrier(2)

    def work() -> None:
        with section:
            inside.wait()
            cap.clock.advance(0.5)
            inside.wait()
        train.stop()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts(cap.lt.reset()) == {"root.training": 2, "root.training.io": 2}


def test_reset_preempted_after_reading_the_clock_counts_each_lap_once() -> None:
    """A lap made between reset()'s clock read and its cut is counted once, not twice."""
    clock = PreemptingClock()
    cap = capture(trace_every=0, clock=clock)
    train = cap.lt.timer("training")
    worker = Worker()
    worker.run(train.record)
    ran = 0
    windows = []
    for _ in range(10):
        for _ in range(5):
            clock.advance(0.001)
            worker.run(train.record)
            ran += 1

        def lap_in_between() -> None:
            clock.advance(0.001)
            worker.run(train.record)

        clock.on_read = lap_in_between
        windows.append(cap.lt.reset())
        ran += 1
    worker.run(train.stop)
    windows.append(cap.lt.reset())
    worker.close()
    assert ran == 60
    assert round(sum(w["root.training"].total for w in windows), 9) == 0.06


@pytest.mark.parametrize("action", ["stop", "record", "reset"])
def test_deep_recursion_needs_no_stack_in_the_engine(cap: Capture, action: str) -> None:
    """450 nested decorated calls, then stop/record/reset at the bottom: no RecursionError."""
    train = cap.lt.timer("training")
    depth = 450

    @train.timed("dive")
    def dive(n: int) -> None:
        cap.clock.advance(0.001)
        if n > 1:
            dive(n - 1)
        elif action == "stop":
            train.stop()
        elif action == "record":
            train.record()
        else:
            cap.lt.reset()

    train.record()
    dive(depth)
    train.stop()
    assert cap.lt.reset()["root.training.dive"].count == depth


def test_asyncio_tasks_keep_their_own_sections(cap: Capture) -> None:
    """Two tasks on one loop: B entering a section does not end A's, each measures its own."""
    t = cap.lt.timer("handler")
    clock = cap.clock

    async def main() -> None:
        a_in, b_done = asyncio.Event(), asyncio.Event()

        async def task_a() -> None:
            with t.section("a"):
                a_in.set()
                await b_done.wait()
                clock.advance(0.15)

        async def task_b() -> None:
            await a_in.wait()
            clock.advance(0.1)
            with t.section("b"):
                clock.advance(0.05)
            b_done.set()

        await asyncio.gather(task_a(), task_b())

    asyncio.run(main())
    snap = cap.lt.reset()
    assert totals(snap) == {"root.handler": 0.35, "root.handler.a": 0.3, "root.handler.b": 0.05}
    assert counts(snap) == {"root.handler": 2, "root.handler.a": 1, "root.handler.b": 1}
    assert cap.lt.health().misuse == 0


def test_a_thread_that_timed_before_runs_asyncio_unchanged(cap: Capture) -> None:
    """A thread's first timer call leaves no running loop; tasks there still get their own."""
    t = cap.lt.timer("handler")
    clock = cap.clock
    seen: list[object] = []

    async def task(name: str) -> None:
        with t.section(name):
            await asyncio.sleep(0)
            clock.advance(0.25)

    async def main() -> None:
        await asyncio.gather(task("a"), task("b"))

    def work() -> None:
        with t.section("before"):
            clock.advance(1.0)
        seen.append(asyncio.events._get_running_loop())
        try:
            asyncio.get_running_loop()
        except RuntimeError as error:
            seen.append(str(error))
        asyncio.run(main())
        with t.section("after"):
            clock.advance(2.0)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [None, "no running event loop"]
    snap = cap.lt.reset()
    assert counts(snap) == {
        "root.handler": 4,
        "root.handler.before": 1,
        "root.handler.a": 1,
        "root.handler.b": 1,
        "root.handler.after": 1,
    }
    assert totals(snap)["root.handler.after"] == 2.0
    assert cap.lt.health().misuse == 0


def test_a_task_leaves_its_section_after_the_loop_thread_timed_outside_any_task(
    cap: Capture,
) -> None:
    """A task's exit finds its own state, though the thread's was found last in between."""
    t = cap.lt.timer("handler")
    loop_work = cap.lt.timer("loop")
    clock = cap.clock

    async def task() -> None:
        with t.section("a"):
            clock.advance(0.5)
            asyncio.get_running_loop().call_soon(loop_work.record)  # outside any task
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            clock.advance(0.25)

    async def main() -> None:
        await asyncio.create_task(task())
        await asyncio.sleep(0)  # the task's done callbacks run

    asyncio.run(main())
    with t.section("after"):  # the thread's own entry, after every task is done
        clock.advance(2.0)
    snap = cap.lt.reset()
    assert counts(snap)["root.handler.a"] == 1
    assert totals(snap)["root.handler.a"] == 0.75
    assert totals(snap)["root.handler.after"] == 2.0
    assert cap.lt.health().misuse == 0


def test_a_finished_task_ends_what_it_left_running(cap: Capture) -> None:
    """Sections a task leaves running end when it is done, not in later windows."""
    t = cap.lt.timer("handler")

    async def handle() -> None:
        t.record("x")
        cap.clock.advance(1.0)

    async def main() -> None:
        await asyncio.create_task(handle())
        await asyncio.sleep(0)  # the task's done callbacks run
        cap.clock.advance(5.0)

    asyncio.run(main())
    assert totals(cap.lt.reset()) == {"root.handler": 1.0, "root.handler.x": 1.0}


def test_timed_async_and_generator_functions_measure_the_whole_call(cap: Capture) -> None:
    """@timed on async def, generator and async generator functions spans awaits and yields."""
    t = cap.lt.timer("serve")
    clock = cap.clock

    @t.timed()
    async def handle() -> int:
        clock.advance(0.1)
        await asyncio.sleep(0)
        clock.advance(0.2)
        return 7

    @t.timed()
    def produce() -> Iterator[int]:
        for i in range(3):
            clock.advance(0.1)
            yield i

    @t.timed()
    async def stream() -> AsyncIterator[int]:
        for i in range(2):
            clock.advance(0.25)
            await asyncio.sleep(0)
            yield i

    async def consume() -> list[int]:
        return [item async for item in stream()]

    assert asyncio.run(handle()) == 7
    assert list(produce()) == [0, 1, 2]
    t.stop()
    assert asyncio.run(consume()) == [0, 1]
    first = produce()
    next(first)
    first.close()  # closed early: the call ends there, without an error
    t.stop()
    snap = cap.lt.reset()
    assert sum(s.errors for s in snap.values()) == 0
    assert totals(snap) == {
        "root.serve": 1.2,  # 0.3 + 0.5 in the tasks, 0.3 + 0.1 in this thread
        "root.serve.handle": 0.3,
        "root.serve.produce": 0.4,
        "root.serve.stream": 0.5,
    }


def test_timed_async_generator_passes_asend_and_athrow_through(cap: Capture) -> None:
    """@timed on an async generator hands asend() values and athrow() errors to it."""
    t = cap.lt.timer("serve")

    @t.timed()
    async def echo() -> AsyncGenerator[str, str]:
        received = "start"
        while True:
            try:
                received = yield received
            except KeyError:
                received = "caught"
            cap.clock.advance(0.5)

    async def main() -> list[str]:
        gen = echo()
        replies = [await gen.asend(None), await gen.asend("a"), await gen.athrow(KeyError())]
        replies.append(await gen.asend("b"))
        await gen.aclose()
        return replies

    assert asyncio.run(main()) == ["start", "a", "caught", "b"]
    snap = cap.lt.reset()
    assert snap["root.serve.echo"].count == 1
    assert snap["root.serve.echo"].errors == 0
    assert totals(snap)["root.serve.echo"] == 1.5


def test_closing_a_timed_async_generator_closes_it_at_once(cap: Capture) -> None:
    """aclose() on a @timed async generator runs the generator's finally before it returns."""
    t = cap.lt.timer("serve")
    closed: list[str] = []

    @t.timed()
    async def numbers() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            closed.append("numbers")

    async def main() -> list[str]:
        gen = numbers()
        await gen.__anext__()
        await gen.aclose()
        return list(closed)

    assert asyncio.run(main()) == ["numbers"]
    assert cap.lt.reset()["root.serve.numbers"].errors == 0


def test_an_error_thrown_into_a_timed_async_generator_counts_once(cap: Capture) -> None:
    """An error athrow()n into a @timed async generator propagates and counts as its error."""
    t = cap.lt.timer("serve")

    @t.timed()
    async def numbers() -> AsyncIterator[int]:
        yield 1

    async def main() -> None:
        gen = numbers()
        await gen.__anext__()
        await gen.athrow(ValueError("bad batch"))

    with pytest.raises(ValueError, match="bad batch"):
        asyncio.run(main())
    assert cap.lt.reset()["root.serve.numbers"].errors == 1


def test_a_timed_async_generator_called_wrongly_ends_its_entry(cap: Capture) -> None:
    """A @timed async generator whose call raises ends its entry, counted as an error."""
    t = cap.lt.timer("serve")

    @t.timed()
    async def numbers(count: int) -> AsyncIterator[int]:
        for i in range(count):
            yield i

    async def main() -> None:
        await numbers().__anext__()  # type: ignore[call-arg]

    with pytest.raises(TypeError, match="count"):
        asyncio.run(main())
    assert cap.lt.reset()["root.serve.numbers"].errors == 1


def test_breaking_out_of_a_timed_async_generator_ends_its_entry_there(cap: Capture) -> None:
    """`break` out of a @timed async generator: asyncio's finaliser task ends the entry cleanly."""
    t = cap.lt.timer("serve")
    failures: list[dict[str, object]] = []

    @t.timed()
    async def numbers() -> AsyncIterator[int]:
        for i in range(10):
            cap.clock.advance(0.5)
            yield i

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: failures.append(context)
        )
        async for i in numbers():
            if i == 2:
                break
        for _ in range(3):  # the finaliser's task closes the generator
            await asyncio.sleep(0)
        cap.clock.advance(4.0)  # after the close: in no entry
        gc.collect()  # a failed task reports its exception when it is collected

    asyncio.run(main())
    snap = cap.lt.reset()
    assert (failures, counts(snap), totals(snap), snap["root.serve.numbers"].errors) == (
        [],
        {"root.serve": 1, "root.serve.numbers": 1},
        {"root.serve": 1.5, "root.serve.numbers": 1.5},
        0,
    )
    assert (cap.lt.health().misuse, cap.lt.health().internal_errors) == (0, 0)


def test_a_timed_generator_closed_in_another_thread_ends_in_its_own(cap: Capture) -> None:
    """A @timed generator entered in one thread and closed in another ends its entry at once."""
    t = cap.lt.timer("serve")

    @t.timed()
    def numbers() -> Iterator[int]:
        for i in range(10):
            cap.clock.advance(0.5)
            yield i

    worker = Worker()
    made: list[Iterator[int]] = []
    worker.run(lambda: made.append(numbers()))
    worker.run(lambda: [next(made[0]) for _ in range(2)])
    made.pop().close()  # in this thread
    assert counts(cap.lt.reset()) == {"root.serve": 1, "root.serve.numbers": 1}
    cap.clock.advance(4.0)
    worker.close()
    assert counts(cap.lt.reset()) == {}
    assert (cap.lt.health().misuse, cap.lt.health().internal_errors) == (0, 0)


class FailingClock(FakeClock):
    """A fake clock whose reading number `fail_at` (counting from 1) raises, as a bug would."""

    def __init__(self, fail_at: int) -> None:
        super().__init__(start_s=0.0)
        self.reads = 0
        self.fail_at = fail_at

    def monotonic_ns(self) -> int:
        """Return the time, or raise on the chosen reading."""
        self.reads += 1
        if self.reads == self.fail_at:
            raise RuntimeError("broken inside a timer call")
        return super().monotonic_ns()


def test_an_error_inside_a_timer_call_is_counted_not_raised() -> None:
    """An exception inside a section entry (in a task) is an internal error: counted, logged."""
    clock = FailingClock(fail_at=0)
    cap = capture(clock=clock)
    t = cap.lt.timer("serve")

    @t.timed()
    async def handle() -> int:
        clock.advance(0.25)
        return 7

    clock.fail_at = clock.reads + 1  # the entry's reading of the clock
    assert asyncio.run(handle()) == 7
    assert cap.lt.health().internal_errors == 1
    assert asyncio.run(handle()) == 7  # and the next call is timed as usual
    assert counts(cap.lt.reset()) == {"root.serve": 1, "root.serve.handle": 1}
    cap.lt.shutdown()


def test_an_entry_left_in_another_thread_while_looptrace_is_busy_is_counted(
    cap: Capture, caplog: pytest.LogCaptureFixture
) -> None:
    """Closing a generator of another thread while a reset holds on waits 1 s, then counts it."""
    t = cap.lt.timer("serve")

    @t.timed()
    def numbers() -> Iterator[int]:
        yield from range(10)

    worker = Worker()
    made: list[Iterator[int]] = []
    worker.run(lambda: made.append(numbers()))
    worker.run(lambda: next(made[0]))
    with cap.lt._engine.aggregator.lock:  # (a reset at work: a fault injected for the test)
        made.pop().close()
    assert cap.lt.health().misuse == 1
    assert "section 'root.serve.numbers' left in another thread" in caplog.text
    worker.close()  # the entry ends with its thread
    assert counts(cap.lt.reset()) == {"root.serve": 1, "root.serve.numbers": 1}
