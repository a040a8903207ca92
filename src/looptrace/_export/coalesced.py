"""Work run on a daemon thread of its own, whenever asked; requests made meanwhile coalesce."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Coalesced:
    """Runs `work` on a daemon thread each time it is requested, off the caller's thread.

    Requests made while a run is in progress coalesce into one more run, so a slow `work`
    (a stalled collector) delays later runs but never queues them up. `work` is called with
    the last ticket its run answers (every earlier one too) and must not raise.
    """

    def __init__(self, work: Callable[[int], object], name: str) -> None:
        self._work = work
        self._name = name
        self._cond = threading.Condition()
        self._requested = 0
        self._done = 0
        self.closed = False
        self._thread: threading.Thread | None = None

    def request(self) -> int:
        """Ask for a run; return a ticket for `wait()` (nothing is run once closed).

        Where no thread can be started (at interpreter shutdown, Python 3.12 and newer refuse
        to), the run happens on the caller's thread before this returns.
        """
        with self._cond:
            if self.closed:
                return self._done
            self._requested += 1
            ticket = self._requested
            if self._thread is None:
                thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # "can't create new thread at interpreter shutdown"
                    pass
                else:
                    self._thread = thread
            self._cond.notify_all()
            if self._thread is not None:
                return ticket
        self._work(ticket)
        with self._cond:
            self._done = max(self._done, ticket)
            self._cond.notify_all()
        return ticket

    def wait(self, ticket: int, timeout_s: float) -> bool:
        """Wait until the run for `ticket` is done, at most `timeout_s`; return whether it is."""
        with self._cond:
            return self._cond.wait_for(lambda: self._done >= ticket, timeout_s)

    def close(self) -> None:
        """Run nothing more once the run in progress or requested is done."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def after_fork_in_child(self, *, closed: bool) -> None:
        """Start over in a forked child: a fresh lock, no thread, and idle for good if `closed`."""
        self._cond = threading.Condition()
        self._requested = self._done = 0
        self.closed = closed
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._requested > self._done or self.closed)
                if self._requested <= self._done:
                    return
                ticket = self._requested
            self._work(ticket)
            with self._cond:
                self._done = ticket
                self._cond.notify_all()
