"""Closed windows reach the outputs in the order they closed, whichever thread closed them.

A window closes under the aggregator's lock, but goes to the outputs (snapshot file, metrics
push, `on_reset` hooks) after it, so that a slow output never holds up timer calls. Two
threads closing windows one after the other (a `reset()` and a `shutdown()` from a SIGTERM
flush, say) would otherwise race to the outputs, and a snapshot file could hold the last
window before the one it follows. Each close takes a ticket under that lock; its delivery
waits for the tickets before it, for at most `WAIT_S` (an output stalled that long gives up
its place rather than stall every later window). A delivery that closes a window itself (an
`on_reset` hook calling `reset()`) goes first rather than wait for its own caller.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

# The longest a window's delivery waits for the deliveries of the windows closed before it.
WAIT_S: Final = 10.0


class InOrder:
    """Tickets taken as windows close, and the turns that deliver them in that order."""

    def __init__(self) -> None:
        self._turns = threading.Condition(threading.Lock())
        self._issued = 0  # tickets taken
        self._next = 0  # the ticket whose turn it is
        self._delivering: dict[int, int] = {}  # thread ident -> deliveries it is inside
        self.wait_s = WAIT_S

    def ticket(self) -> int:
        """Take the next ticket; the caller holds the lock its windows close under."""
        with self._turns:
            ticket = self._issued
            self._issued += 1
            return ticket

    @contextmanager
    def turn(self, ticket: int) -> Iterator[None]:
        """Wait until the windows closed before `ticket` are delivered, then deliver it."""
        me = threading.get_ident()
        with self._turns:
            if me not in self._delivering:  # else: closed by one of its own outputs
                self._turns.wait_for(lambda: self._next >= ticket, self.wait_s)
            self._delivering[me] = self._delivering.get(me, 0) + 1
        try:
            yield
        finally:
            with self._turns:
                depth = self._delivering.pop(me) - 1
                if depth:
                    self._delivering[me] = depth
                self._next = max(self._next, ticket + 1)
                self._turns.notify_all()

    def busy(self) -> bool:
        """Whether a window is being delivered now, by any thread."""
        return bool(self._delivering)
