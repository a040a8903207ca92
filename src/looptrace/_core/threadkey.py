"""`thread_key()`: which thread makes a timer call, asked on every call."""

from __future__ import annotations

from collections.abc import Callable
from threading import get_ident
from typing import Final


def _dictionary_of_thread() -> Callable[[], object] | None:
    """Return the C helper built with the compiled core (`_threaddict.c`), else None."""
    try:
        from looptrace._core._threaddict import current  # noqa: PLC0415 - built or not
    except ImportError:  # the pure-Python core: no C helper either
        return None
    return current


# A constant, not a module global: read on every call, compiled it is a C static.
_current_dictionary: Final = _dictionary_of_thread()


def thread_key() -> int:
    """Return the calling thread's key: the same on every call, another in any other live thread.

    With the compiled core it is the address of the thread's state dictionary, which costs no
    allocation (`get_ident()` makes an int on every call); otherwise the thread's ident. A
    key, like an ident, can be reused once its thread has exited.
    """
    current = _current_dictionary
    if current is None:
        return get_ident()
    return id(current())


if _current_dictionary is None:
    # The pure-Python core: timer calls call `get_ident` itself, which saves them a Python
    # call each (compiled, they call the function above directly, whatever this name holds).
    thread_key = get_ident
