"""`now_in` / `now_plain`: a timer call's thread check and clock reading in one call."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from looptrace._core import threadkey
from looptrace._core.build import core_kind
from looptrace.testing import FakeClock

NowIn = Callable[[object, Callable[[], int]], "int | None"]
NowPlain = Callable[[object, Callable[[], int], Callable[[], object]], "int | None"]

# Each implementation with the key it compares: the pure-Python core's and, when built, the C
# helper's (which the compiled core calls).
IMPLEMENTATIONS: list[tuple[str, NowIn, NowPlain, Callable[[], object]]] = [
    ("pure Python", threadkey._now_in, threadkey._now_plain, threading.get_ident),
]
if threadkey._HELPER is not None:
    IMPLEMENTATIONS.append(
        ("C helper", threadkey._HELPER.now_in, threadkey._HELPER.now_plain, threadkey.thread_key)
    )


def no_loop() -> object:
    """Find no running loop (a getter for `now_plain`)."""
    return None


def test_the_compiled_core_calls_the_c_helper() -> None:
    """Compiled, the core's `now_in` / `now_plain` are the C helper's; else the Python ones."""
    if core_kind() == "compiled":
        assert threadkey._HELPER is not None
        assert threadkey.now_in is threadkey._HELPER.now_in
        assert threadkey.now_plain is threadkey._HELPER.now_plain
    else:
        assert threadkey.now_in is threadkey._now_in
        assert threadkey.now_plain is threadkey._now_plain


@pytest.mark.parametrize(("kind", "now_in", "now_plain", "key_of"), IMPLEMENTATIONS)
def test_a_reading_comes_only_in_the_thread_of_the_key(
    kind: str, now_in: NowIn, now_plain: NowPlain, key_of: Callable[[], object]
) -> None:
    """The clock is read and returned in the key's thread; another thread gets None, unread.

    Keys of two threads, asked in turn, each answer for their own thread only.
    """
    clock = FakeClock(start_s=2.0)
    key = key_of()
    assert now_in(key, clock.monotonic_ns) == 2_000_000_000
    assert now_plain(key, clock.monotonic_ns, no_loop) == 2_000_000_000
    seen: list[object] = []
    reads: list[int] = []

    def counted() -> int:
        reads.append(1)
        return clock.monotonic_ns()

    def other_thread() -> None:
        seen.extend([now_in(key, counted), now_plain(key, counted, no_loop)])
        own = key_of()  # its own key, then the first thread's again, then its own
        seen.extend([now_in(own, counted), now_in(key, counted), now_plain(own, counted, no_loop)])

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen == [None, None, 2_000_000_000, None, 2_000_000_000]
    assert len(reads) == 2
    assert now_in(key, clock.monotonic_ns) == 2_000_000_000  # the first thread's, again


@pytest.mark.parametrize(("kind", "now_in", "now_plain", "key_of"), IMPLEMENTATIONS)
def test_now_plain_gives_none_while_an_event_loop_runs(
    kind: str, now_in: NowIn, now_plain: NowPlain, key_of: Callable[[], object]
) -> None:
    """Inside a running asyncio loop `now_plain` is None (the call goes to the task's state)."""
    clock = FakeClock(start_s=1.0)

    async def inside() -> tuple[int | None, int | None]:
        key = key_of()
        getter = asyncio.events._get_running_loop
        return now_plain(key, clock.monotonic_ns, getter), now_in(key, clock.monotonic_ns)

    assert asyncio.run(inside()) == (None, 1_000_000_000)
    loop_getter = asyncio.events._get_running_loop
    assert now_plain(key_of(), clock.monotonic_ns, loop_getter) == 1_000_000_000


@pytest.mark.parametrize(("kind", "now_in", "now_plain", "key_of"), IMPLEMENTATIONS)
def test_the_host_clock_is_read_like_a_direct_call(
    kind: str, now_in: NowIn, now_plain: NowPlain, key_of: Callable[[], object]
) -> None:
    """`time.perf_counter_ns` (a builtin the C helper calls directly) gives its own readings."""
    before = time.perf_counter_ns()
    first = now_in(key_of(), time.perf_counter_ns)
    second = now_plain(key_of(), time.perf_counter_ns, no_loop)
    after = time.perf_counter_ns()
    assert first is not None
    assert second is not None
    assert before <= first <= second <= after


@pytest.mark.parametrize(("kind", "now_in", "now_plain", "key_of"), IMPLEMENTATIONS)
def test_a_clock_that_fails_raises_its_own_error(
    kind: str, now_in: NowIn, now_plain: NowPlain, key_of: Callable[[], object]
) -> None:
    """An error of the clock or of the loop getter comes through unchanged."""

    def broken() -> int:
        raise OSError("clock unreadable")

    def broken_loop() -> object:
        raise RuntimeError("no loop policy")

    with pytest.raises(OSError, match="clock unreadable"):
        now_in(key_of(), broken)
    with pytest.raises(RuntimeError, match="no loop policy"):
        now_plain(key_of(), time.perf_counter_ns, broken_loop)


@pytest.mark.skipif(threadkey._HELPER is None, reason="built with the compiled core only")
def test_the_c_helper_names_a_wrong_call() -> None:
    """A call with the wrong number of arguments or a key that is no int says what is wrong."""
    helper = threadkey._HELPER
    assert helper is not None
    with pytest.raises(TypeError, match=r"now_in\(\) takes 2 arguments \(1 given\)"):
        helper.now_in(threadkey.thread_key())
    with pytest.raises(TypeError, match=r"now_plain\(\) takes 3 arguments \(2 given\)"):
        helper.now_plain(threadkey.thread_key(), time.perf_counter_ns)
    with pytest.raises(TypeError):
        helper.now_in("a key", time.perf_counter_ns)
