"""How every timer call enters the core: its thread's state, the busy mark, a claim, the clock.

`record()`, `stop()`, a section's entry and exit (the in-place ones and the general ones) all
begin with `begin()`, and end by handing the busy mark back (`state.busy = was`) in a
`finally`. Compiled, `begin()` is a direct C call whose result is a C struct: it costs what
the lines it holds cost, and its callers keep the state in a variable of its own type, which
is checked once. In the pure-Python core it is one Python call more than the lines would be
inline; it asks which thread and loop run itself (`threadkey.PLAIN_KEYS`), a call less.
"""

from __future__ import annotations

from asyncio.events import _get_running_loop
from threading import get_ident
from typing import TYPE_CHECKING, Final

from looptrace._core.threadkey import PLAIN_KEYS, now_in, now_plain

if TYPE_CHECKING:
    from looptrace._core.engine import Engine
    from looptrace._core.intervals import ThreadState
    from looptrace._core.timer import Timer

# A constant, not a module global: read on every call, compiled it is a C static.
_running_loop: Final = _get_running_loop

# What a call is, for its refusal after `shutdown()` and for how it reads the clock.
RECORD: Final = 0
STOP: Final = 1
ENTER: Final = 2
EXIT: Final = 3  # (not refused: an exit after shutdown() finds its entry ended, and counts nothing)


def begin(  # noqa: PLR0912 - hot path, inlined
    engine: Engine, timer: Timer, call: int
) -> tuple[ThreadState | None, int, bool]:
    """Enter a timer call `call` of `timer`: return `(state, now, was)`, state None to do nothing.

    Finds the calling thread's (or asyncio task's) state, marks it busy and waits while another
    thread claims it (`ThreadState.wait_turn`); `now` is the clock's reading, never from before
    the state's latest `reset()` cut. `was` is the busy mark before (True only in a timer call
    made inside one, e.g. by a finaliser): the caller restores it, `state.busy = was`, when
    done. A call other than an exit after `shutdown()` is refused (counted as misuse); a call
    whose state `shutdown()` closed while it waited does nothing.
    """
    if engine.closed and call != EXIT:
        engine.refuse(_refusal(timer, call))
        return None, 0, False
    last = engine.states.last
    try:
        # One call checks the thread (and, but at an exit, the asyncio loop) and reads the
        # clock: None otherwise. An exit needs no loop check while the thread has no asyncio
        # task with timer state: an entry made in a task was made in the task's state, which
        # counts in its thread's `tasks` until it is done.
        if last is None:
            reading = None
        elif PLAIN_KEYS:  # (`now_plain` and `now_in` inline: a Python call less)
            if last.key != get_ident() or (
                last.tasks if call == EXIT else _running_loop() is not None
            ):
                reading = None
            else:
                reading = engine.now()
        elif call != EXIT:
            reading = now_plain(last.key, engine.now, _running_loop)
        elif last.tasks:
            reading = None
        else:
            reading = now_in(last.key, engine.now)
        state: ThreadState = engine.states.state() if last is None or reading is None else last
    except Exception:  # a bug of looptrace's (or of its clock): counted, never raised
        engine.incidents.failed(_CALLS[call])
        return None, 0, False
    was = state.busy
    state.busy = True  # no lock: see `ThreadState`
    try:
        if state.claimed and not was:
            if not state.wait_turn():  # shut down since the check above
                state.busy = was
                return None, 0, False
            reading = None  # read before the wait
        # A reading from before a reset() cut that came between it and `busy`: read again.
        if reading is None:
            now = engine.now()
        else:
            now = reading
            if now < state.last_cut:
                now = engine.now()
    except Exception:  # (as above)
        state.busy = was
        engine.incidents.failed(_CALLS[call])
        return None, 0, False
    return state, now, was


_CALLS: Final = ("record()", "stop()", "a section entry", "a section exit")


def _refusal(timer: Timer, call: int) -> str:
    """Say which call came after `shutdown()`."""
    if call == RECORD:
        return f"{timer.path}.record() after shutdown()"
    if call == STOP:
        return f"{timer.path}.stop() after shutdown()"
    return f"{timer.path} entered after shutdown()"
