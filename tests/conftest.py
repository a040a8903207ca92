"""Shared fixtures, and the `slow` marker: `pytest -m "not slow"` runs the in-process tests.

A test is `slow` when it starts another process or a real server: its body, a helper or
fixture of its module that it uses (transitively), names one of `SLOW_NAMES`. New test files
are classified by what they do, with nothing to register; `@pytest.mark.slow` marks a test
explicitly.
"""

from __future__ import annotations

import ast
import functools
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from looptrace.testing import Capture, FakeClock, capture

SLOW_NAMES = frozenset(
    {
        "subprocess",  # another Python, a CLI, promtool, a rank of a torch.distributed job
        "fork",
        "OtlpReceiver",  # the real OTLP receivers of tests/otlp_server.py
        "StalledServer",
        "Prometheus",  # real servers of tests/servers.py
        "Mlflow",
        "free_port",  # a port for looptrace's Prometheus endpoint, a real HTTP server
    }
)


@functools.cache
def slow_functions(path: Path) -> frozenset[str]:
    """Return the module-level functions (tests, helpers, fixtures) of a file that are slow."""
    names: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            used = names[node.name] = set()
            for statement in node.body:
                for inner in ast.walk(statement):
                    if isinstance(inner, ast.Name):
                        used.add(inner.id)
                    elif isinstance(inner, ast.Attribute):
                        used.add(inner.attr)
    slow = {name for name, used in names.items() if used & SLOW_NAMES}
    while grown := {name for name, used in names.items() if used & slow} - slow:
        slow |= grown
    return frozenset(slow)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that start a process or a real server `slow`."""
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        slow = slow_functions(Path(item.path))
        if item.originalname in slow or slow.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def cap() -> Iterator[Capture]:
    """Yield a looptrace on a fake clock at 0 s, spans and metrics in memory; shut it down."""
    result = capture()
    yield result
    result.lt.shutdown()


def counts(snapshot: object) -> dict[str, int]:
    """Return `{path: count}` of a snapshot."""
    from looptrace import Snapshot

    assert isinstance(snapshot, Snapshot)
    return {path: stats.count for path, stats in snapshot.items()}


def totals(snapshot: object) -> dict[str, float]:
    """Return `{path: total seconds}` of a snapshot, rounded to the nanosecond."""
    from looptrace import Snapshot

    assert isinstance(snapshot, Snapshot)
    return {path: round(stats.total, 9) for path, stats in snapshot.items()}


class PreemptingClock(FakeClock):
    """A fake clock that runs `on_read` once, right after the next reading it hands out.

    It stands for a thread preempted just after reading the clock: whatever `on_read` does
    (e.g. another thread's lap) happens between that reading and the reader's next step.
    """

    def __init__(self) -> None:
        super().__init__(start_s=0.0)
        self.on_read: Callable[[], None] | None = None

    def monotonic_ns(self) -> int:
        """Return the time, then run the pending `on_read` once."""
        now = super().monotonic_ns()
        hook, self.on_read = self.on_read, None
        if hook is not None:
            hook()
        return now


class Worker:
    """A thread that runs the calls it is handed one at a time, each before `run()` returns.

    Tests drive several of these to play an exact interleaving of timer calls across threads.
    """

    def __init__(self) -> None:
        self._calls: queue.Queue[Callable[[], object] | None] = queue.Queue()
        self._done: queue.Queue[BaseException | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                call()
            except BaseException as error:  # handed back to the caller of run()
                self._done.put(error)
            else:
                self._done.put(None)

    def run(self, call: Callable[[], object]) -> None:
        """Run `call` in this worker's thread and wait for it."""
        self._calls.put(call)
        error = self._done.get(timeout=30)
        if error is not None:
            raise error

    def close(self) -> None:
        """Let the thread end (its running sections end with it) and wait for it."""
        self._calls.put(None)
        self._thread.join(timeout=30)
