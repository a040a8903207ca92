"""The object whose death tells looptrace that a thread exited.

An interpreted class on purpose: it must support weak references, which the compiled
classes of the hot path do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from looptrace._core.intervals import ThreadState


class ExitSentinel:
    """Lives in the thread-local slot; when the thread exits it dies and closes the state."""

    __slots__ = ("__weakref__", "state")

    def __init__(self, state: ThreadState) -> None:
        self.state = state
