"""What looptrace assumes of CPython (`_core/cpython.py`): a test per assumption; the GIL check."""

from __future__ import annotations

import asyncio
import ctypes
import subprocess
import sys
import textwrap
import threading
import types
import weakref

import pytest

from looptrace._core import cpython
from looptrace._core.build import core_kind
from looptrace._core.intervals import discard, find, slot_list
from looptrace._core.threadkey import thread_key
from looptrace.testing import Capture

from .helpers.processes import bare_env


def thread_state_id() -> int:
    """Return the calling thread state's `PyThreadState_GetID`, asked through ctypes."""
    api = ctypes.pythonapi
    api.PyThreadState_Get.restype = ctypes.c_void_p
    api.PyThreadState_GetID.argtypes = [ctypes.c_void_p]
    api.PyThreadState_GetID.restype = ctypes.c_uint64
    return int(api.PyThreadState_GetID(api.PyThreadState_Get()))


def run_in_thread(target: types.FunctionType) -> None:
    """Run `target` in a new thread and wait until that thread has exited."""
    thread = threading.Thread(target=target)
    thread.start()
    thread.join()


def test_assumption_gil() -> None:
    """The interpreter runs with the GIL, which the timer calls' busy mark and claim rely on."""
    assert cpython.gil_enabled()


def test_assumption_thread_exit() -> None:
    """A thread's `threading.local` data is released in that thread as it exits."""
    local = threading.local()
    released_in: list[int] = []
    owner: list[int] = []

    class Data:
        """An object held only by the thread's local data."""

    def use_local() -> None:
        owner.append(threading.get_ident())
        local.data = Data()
        finalizer = weakref.finalize(local.data, lambda: released_in.append(threading.get_ident()))
        finalizer.atexit = False

    run_in_thread(use_local)
    assert released_in == owner


def test_assumption_thread_state_id() -> None:
    """Thread state ids are never given again: each of 20 threads, one after another, has its own.

    Compiled, they are the core's key of a thread.
    """
    ids: list[int] = []
    keys: list[object] = []

    def ask() -> None:
        ids.append(thread_state_id())
        keys.append(thread_key())

    for _ in range(20):
        run_in_thread(ask)
    assert len(set(ids)) == 20
    assert thread_state_id() not in ids
    if core_kind() == "compiled":
        assert keys == ids


def test_assumption_list_room(cap: Capture) -> None:
    """A list with room for one keeps it through append and the core's pop where expected.

    `list_room_kept` says where: the compiled core (mypyc's pop), and CPython before 3.12.
    Elsewhere pop() of the last item frees the room and append() takes room for 4.
    """
    train = cap.lt.timer("train")
    with train.section("step"):  # a running interval, to put in a list and take out
        state = cap.lt._engine.states.thread_state()
        found = find(state, train)
        assert found is not None
        interval = found.stack[0]
    items = slot_list()
    room = sys.getsizeof(items)
    sizes = []
    for _ in range(3):
        items.append(interval)
        sizes.append(sys.getsizeof(items))
        discard(items, interval)  # the core's removal: compiled, mypyc's pop()
        sizes.append(sys.getsizeof(items))
    if cpython.list_room_kept(core_kind()):
        assert (room, sizes) == (sys.getsizeof([None]), [room] * 6)
    else:
        empty, four = sys.getsizeof([]), sys.getsizeof([None] * 4)
        assert (room, sizes) == (empty, [four, empty] * 3)


def test_assumption_running_loop() -> None:
    """Asyncio's `_get_running_loop` is a builtin without arguments; `_set_running_loop` exists."""
    get_loop = asyncio.events._get_running_loop
    assert isinstance(get_loop, types.BuiltinFunctionType)
    assert callable(asyncio.events._set_running_loop)

    async def running() -> object:
        return get_loop()

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(running()) is loop
    finally:
        loop.close()
    assert get_loop() is None


def test_assumption_list_copy() -> None:
    """A list copied while another thread grows and shrinks it is always a whole state of it."""
    items: list[int] = []
    done = threading.Event()

    def churn() -> None:
        while not done.is_set():
            for _ in range(1000):
                items.append(len(items))
                if len(items) > 50:
                    del items[25:]

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        torn = [
            copy for copy in (list(items) for _ in range(20_000)) if copy != [*range(len(copy))]
        ]
    finally:
        done.set()
        worker.join()
    assert torn == []


def test_every_assumption_has_its_test() -> None:
    """Each assumption listed in `_core/cpython.py` has a `test_assumption_<name>` here."""
    tests = {name for name in globals() if name.startswith("test_assumption_")}
    listed = {f"test_assumption_{a.name.replace('-', '_')}" for a in cpython.ASSUMPTIONS}
    assert tests == listed


def test_this_python_version_was_checked() -> None:
    """The running CPython's minor version is among those the assumptions were checked on."""
    checked = {version.rsplit(".", 1)[0] for version in cpython.CHECKED_ON}
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in checked


def test_gil_enabled_without_the_check_is_true(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPython without `sys._is_gil_enabled` (before 3.13) always has the GIL."""
    monkeypatch.delattr(sys, "_is_gil_enabled", raising=False)
    assert cpython.gil_enabled()


def test_configure_refuses_a_python_without_the_gil() -> None:
    """Without the GIL (faked) `configure()` says why in a ConfigError and installs nothing.

    With the GIL (faked too) it runs.
    """
    code = """
        import sys
        from opentelemetry import trace
        import looptrace
        sys._is_gil_enabled = lambda: False
        before = trace.get_tracer_provider()
        try:
            looptrace.configure()
        except looptrace.ConfigError as error:
            print(error)
        print(trace.get_tracer_provider() is before)
        sys._is_gil_enabled = lambda: True
        lt = looptrace.configure()
        with lt.timer("train").section("step"):
            pass
        print(lt.reset()["root.train.step"].count)
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        env=bare_env(),
        timeout=60,
    )
    refused, installed_nothing, counted = result.stdout.strip().split("\n")
    assert refused.startswith("looptrace needs the GIL, and this free-threaded Python runs")
    assert "PYTHON_GIL=1" in refused
    assert (installed_nothing, counted) == ("True", "1")
