"""Counting helpers and clocks that the timer tests share."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from looptrace.testing import FakeClock


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
