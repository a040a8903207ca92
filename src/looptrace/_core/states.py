"""Where each thread's and asyncio task's timer state lives, and how it is found and retired."""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from asyncio import current_task
from asyncio.events import _get_running_loop, _set_running_loop
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final

from looptrace._core.intervals import ThreadState
from looptrace._core.sentinel import ExitSentinel
from looptrace._core.threadkey import thread_key

# A constant, not a module global: read on every call, compiled it is a C static.
_running_loop: Final = _get_running_loop


class States:
    """The timer states of every thread, and of every asyncio task inside a running loop.

    A state is made on first use. When its thread exits (or its task is done) it is queued
    with the exit time for the engine to close: the finaliser that reports a thread's exit
    can run inside `os.fork`, so it takes no lock.

    `last` is the thread state found last. A timer call checks it against its thread's
    key (`thread_key()`) before the slower `threading.local` lookup. A thread's state stops
    being `last` when the thread exits: its finaliser runs in the exiting thread, before the
    key can be reused.
    """

    def __init__(self, now: Callable[[], int]) -> None:
        self.now = now
        self.local = threading.local()
        self.lock = threading.Lock()
        self._by_id: dict[int, ThreadState] = {}
        self.exited: deque[tuple[ThreadState, int]] = deque()
        self.on_new: Callable[[], None] = lambda: None  # runs before a state is made
        self.last: ThreadState | None = None
        self._pid = os.getpid()
        self._task: ContextVar[tuple[weakref.ref[asyncio.Task[Any]], ThreadState] | None] = (
            ContextVar("looptrace_task_state", default=None)
        )

    def state(self) -> ThreadState:
        """Return the running asyncio task's state, else the calling thread's."""
        if _running_loop() is not None:
            return self.task_state()
        return self.thread_state()

    def thread_state(self) -> ThreadState:
        """Return the calling thread's state, made on first use."""
        last = self.last
        if last is not None and last.key == thread_key():
            return last
        try:
            state: ThreadState = self.local.state
        except AttributeError:
            state = self._new_thread_state()
        self.last = state
        return state

    def _new_thread_state(self) -> ThreadState:
        if _running_loop() is None:
            # CPython 3.11 answers "no running loop" in a thread that never ran one with a
            # lookup in the thread's dictionary, on every timer call; once the thread's loop
            # is set to None (as asyncio does when a loop stops) it answers from a cache.
            _set_running_loop(None)
        state = self._new()
        holder = ExitSentinel(state)
        finalizer = weakref.finalize(holder, self.ended, state)
        finalizer.atexit = False
        self.local.holder = holder
        self.local.state = state
        return state

    def task_state(self) -> ThreadState:
        """Return the state of the running asyncio task (the thread's outside any task).

        Concurrent tasks on one thread each lap their own timers; a task's running sections
        end when it is done.
        """
        task = current_task()
        if task is None:
            return self.thread_state()
        found = self._task.get()
        if found is not None and found[0]() is task:
            return found[1]
        home = self.thread_state()  # counts the task's state while it lives (see `_exit`)
        state = self._new()
        self._task.set((weakref.ref(task), state))
        home.tasks += 1

        def done(_task: object) -> None:
            home.tasks -= 1
            self.ended(state)

        task.add_done_callback(done)
        return state

    def _new(self) -> ThreadState:
        if self.exited:
            self.on_new()
        state = ThreadState()
        with self.lock:
            self._by_id[id(state)] = state
        return state

    def ended(self, state: ThreadState) -> None:
        """Queue a state whose thread or task ended (may run inside `os.fork`: no locks)."""
        if self.last is state:
            self.last = None
        if os.getpid() == self._pid:  # in a forked child the state belongs to the parent
            self.exited.append((state, self.now()))

    def busy_here(self) -> bool:
        """Whether a state of the calling thread (or of one of its tasks) is in a timer call.

        Takes no lock: a signal handler asks it in the thread it interrupted, which may hold
        any of them.
        """
        key = thread_key()
        return any(state.busy and state.key == key for state in list(self._by_id.values()))

    def all(self) -> list[ThreadState]:
        """Return every live state."""
        with self.lock:
            return list(self._by_id.values())

    def retire(self, state: ThreadState) -> bool:
        """Forget an ended state; False if it is not one of the live ones (e.g. after fork)."""
        with self.lock:
            if self._by_id.get(id(state)) is not state:
                return False
            del self._by_id[id(state)]
            return True

    def after_fork_in_child(self) -> ThreadState | None:
        """Keep only the forking thread's state, under fresh locks; return it."""
        self.lock = threading.Lock()
        self._by_id = {}
        self.exited = deque()
        self._pid = os.getpid()
        state: ThreadState | None = getattr(self.local, "state", None)
        self.last = state  # other threads' keys may be reused by the child's threads
        if state is not None:
            self._by_id[id(state)] = state
        return state
