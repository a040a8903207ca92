"""Which thread makes a timer call, asked on every call, with the call's clock reading.

`thread_key()` says which thread runs. A timer call's fast path asks `now_in(key, clock)` or
`now_plain(key, clock, running_loop)` instead: the clock's reading when the caller is the
thread of `key` (its state's), else None; `now_plain` also None while an asyncio event loop
runs in the thread. The reading is taken before the call marks its state busy, so a caller
compares it with the state's latest `reset()` cut (`ThreadState.last_cut`).
"""

from __future__ import annotations

from collections.abc import Callable
from threading import get_ident
from types import ModuleType
from typing import Final


def _helper() -> ModuleType | None:
    """Return the C helper built with the compiled core (`_threaddict.c`), else None."""
    try:
        from looptrace._core import _threaddict  # noqa: PLC0415 - built or not
    except ImportError:  # the pure-Python core: no C helper either
        return None
    return _threaddict


_HELPER: Final = _helper()
# Without the helper, keys are `get_ident()`: a caller may ask `now_in`/`now_plain`'s questions
# itself, which saves the pure-Python core a Python call a timer call (`calls.begin`).
PLAIN_KEYS: Final = _HELPER is None

# Constants, not module globals: read on every call, compiled they are C statics.
_helper_key: Final[Callable[[], object] | None] = None if _HELPER is None else _HELPER.key


def thread_key() -> object:
    """Return the calling thread's key: the same on every call, another in any other live thread.

    With the compiled core it is the thread state's unique id, never reused while the process
    lives and (for the first 256 threads) a cached int: no allocation; otherwise the thread's
    ident, which a thread started after this one exited can get again. Keys compare with `==`.
    """
    key = _helper_key
    if key is None:
        return get_ident()
    return key()


def _now_in(key: object, clock: Callable[[], int]) -> int | None:
    """Return `clock()` when called in the thread of `key`, else None (the pure-Python core)."""
    return clock() if key == get_ident() else None


def _now_plain(
    key: object, clock: Callable[[], int], running_loop: Callable[[], object]
) -> int | None:
    """Return `_now_in(key, clock)`, but None while `running_loop()` is not None."""
    if key != get_ident() or running_loop() is not None:
        return None
    return clock()


now_in: Final[Callable[[object, Callable[[], int]], int | None]] = (
    _now_in if _HELPER is None else _HELPER.now_in
)
now_plain: Final[Callable[[object, Callable[[], int], Callable[[], object]], int | None]] = (
    _now_plain if _HELPER is None else _HELPER.now_plain
)

if _helper_key is None:
    # The pure-Python core: callers (finding a thread's state) call `get_ident` itself, which
    # saves them a Python call each (compiled, they call the function above directly,
    # whatever this name holds).
    thread_key = get_ident
