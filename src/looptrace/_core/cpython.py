"""What looptrace assumes of CPython, the versions it was checked on, and the check of the GIL.

The hot path takes no lock and allocates as little as it can, and for both it relies on how
CPython behaves, not only on what the language promises. Each assumption below has a test in
`tests/test_cpython.py` that fails if CPython stops meeting it; CI runs them on every version
`requires-python` admits (`.ci/other-pythons`). The one a build can break by design, the GIL,
is also checked at `configure()` (`check_gil`): a free-threaded build running without it is
refused with a `ConfigError`, never trusted.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Final

from looptrace._base.errors import ConfigError

# The CPython releases the assumptions were checked on (their tests passed).
CHECKED_ON: Final = ("3.10.13", "3.11.7", "3.12.1", "3.13.0")


@dataclass(frozen=True)
class Assumption:
    """One behaviour of CPython that looptrace relies on, and where."""

    name: str
    relied_on_by: str
    statement: str


ASSUMPTIONS: Final = (
    Assumption(
        "gil",
        "a timer call's busy mark and the claim of `reset()` or of an exited thread's close "
        "(`ThreadState` in `_core/intervals.py`), with no lock",
        "One thread at a time runs Python code, and what it wrote is seen by the thread that "
        "runs next, so a thread's busy mark and a claim each see the other's. A free-threaded "
        "build running without the GIL does not give this: `configure()` refuses it.",
    ),
    Assumption(
        "thread-exit",
        "`States` (`_core/states.py`): an exited thread's state is closed, and stops being the "
        "state a timer call finds first, by the finaliser of its `threading.local` data",
        "When a thread exits, its `threading.local` data is released in that thread, before "
        "its ident (the pure-Python core's key of a thread) can be given to another thread.",
    ),
    Assumption(
        "thread-state-id",
        "the C helper of the compiled core (`_core/_threaddict.c`): its key of a thread",
        "`PyThreadState_GetID` gives every thread state of the process an id of its own, which "
        "no thread started later gets again. (Not the address of the thread's state "
        "dictionary: CPython 3.13 frees that before the thread's `threading.local` data, so a "
        "new thread's dictionary could take the address while the exited thread's state was "
        "still found by it.)",
    ),
    Assumption(
        "list-room",
        "`slot_list` (`_core/intervals.py`): a section's stack goes from empty to one interval "
        "and back with no allocation",
        "A list keeps its allocated room while it shrinks to no less than half of it, so a "
        "list with room for one item keeps it through `append()` and `pop()`. The compiled "
        "core's `pop()` is mypyc's, which keeps it on every version; CPython's does on 3.10 "
        "and 3.11 only: from 3.12 `pop()` of the last item frees the room "
        "(`list_room_kept`), so there the pure-Python core allocates when a section is "
        "entered on an empty stack and frees at its exit: a cost, not a wrong number.",
    ),
    Assumption(
        "running-loop",
        "`States` and the C helper: whether an asyncio event loop runs in the calling thread",
        "`asyncio.events._get_running_loop()` and `_set_running_loop()` exist; the first takes "
        "no argument and returns the thread's running loop or None.",
    ),
    Assumption(
        "list-copy",
        "`read_open` (`_core/open_sections.py`): `open_sections()`, the hang watchdog and the "
        "open-step gauges read other threads' lists of running intervals with no lock",
        "`list(items)` copies a list in one C call that runs no Python code and so never "
        "lets another thread run: the copy is the list as it was at one moment, whatever the "
        "owner thread (pure Python or compiled) does to it meanwhile.",
    ),
)


def list_room_kept(core: str) -> bool:
    """Return whether `slot_list`'s room survives `pop()` of its last item in `core` here.

    `core` is the running core's kind (`build.core_kind()`); see `ASSUMPTIONS`.
    """
    return core == "compiled" or sys.version_info < (3, 12)


def gil_enabled() -> bool:
    """Return whether the GIL is enabled.

    It always is on a default build; on a free-threaded one (3.13t and later) only when asked
    for (`PYTHON_GIL=1`) or when a module that needs it was imported.
    """
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return True if is_enabled is None else bool(is_enabled())


def check_gil() -> None:
    """Refuse to run where the GIL is disabled (see `ASSUMPTIONS`).

    Raises:
        ConfigError: the interpreter is a free-threaded build running without the GIL.

    """
    if not gil_enabled():
        raise ConfigError(
            "looptrace needs the GIL, and this free-threaded Python runs without it: its timer "
            "calls take no lock and rely on the GIL to order a thread's busy mark against "
            "reset()'s claim, so they could lose or corrupt measurements. Run with the GIL "
            "(PYTHON_GIL=1 or `python -X gil=1`) or on a default CPython build"
        )
