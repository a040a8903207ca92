"""Ending a section entry in another asyncio task or thread than the one that made it.

A `@timed` async generator that its consumer leaves early (`break`) is closed by asyncio's
finaliser in a task of its own; a `@timed` generator can be closed in any thread. The entry's
interval belongs to the state of the task or thread that entered it, and ends there, at the
time of the close.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from looptrace._core.threadkey import thread_key

if TYPE_CHECKING:
    from looptrace._core.engine import Engine
    from looptrace._core.intervals import Interval, ThreadState

# How long a thread waits for another thread's timers before it leaves an entry running (the
# aggregator's lock is held for a reset, which does no more than hand logs over).
WAIT_S: Final = 1.0


def leave_elsewhere(engine: Engine, interval: Interval, error: BaseException | None) -> None:
    """End a section entry's `interval`, made in another task or thread than the caller's."""
    home = interval.state.owner
    if home.key == thread_key():
        # Another asyncio task of this thread: no other thread works on `home` but a claimer,
        # so this call takes it as its owner's own calls do.
        was = home.busy
        home.busy = True
        if home.claimed and not was:
            home.wait_turn()
        try:
            _leave(engine, home, interval, error)
        finally:
            home.busy = was
        if home.fold_due and not was:
            engine.windows.merge_pending(home)
        return
    # Another thread: take its state from it as `reset()` does (lock order: the aggregator's
    # lock before a claim); its next timer call merges what this one logged.
    lock = engine.aggregator.lock
    if not lock.acquire(timeout=WAIT_S):
        engine.incidents.misused(
            "elsewhere",
            f"section {interval.node.path!r} left in another thread while looptrace was "
            "busy for more than a second: the entry runs on until its timer's interval ends "
            "in the thread that entered it",
        )
        return
    try:
        home.claim()
        try:
            _leave(engine, home, interval, error)
        finally:
            home.unclaim()
    finally:
        lock.release()


def _leave(
    engine: Engine, home: ThreadState, interval: Interval, error: BaseException | None
) -> None:
    """End `interval` in `home` now, unless something ended it already (a lap, a switch)."""
    if engine.closed or interval not in interval.state.stack:
        return
    try:
        engine.leave(home, interval, max(engine.now(), home.last_cut), error, held=False)
    except Exception:  # never into the code that closed the generator
        engine.incidents.failed("a section entry left in another task or thread")
