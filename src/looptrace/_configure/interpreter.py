"""What `configure()` checks of the interpreter: a build looptrace cannot run on, and the core.

A free-threaded Python without the GIL is refused (`_core/cpython.py`). An installed copy that
runs the pure-Python core says once per process why, and how to get the compiled one.
"""

from __future__ import annotations

import logging

from looptrace._core import build
from looptrace._core.cpython import check_gil

_log = logging.getLogger("looptrace")
_noted = False


def check_interpreter() -> None:
    """Refuse a free-threaded Python without the GIL; note a pure-Python core, once.

    Raises:
        ConfigError: the GIL is disabled.

    """
    check_gil()
    global _noted  # noqa: PLW0603 - once per process
    if not _noted:
        _noted = True
        _note_pure_core()


def _note_pure_core() -> None:
    kind = build.core_kind()
    if kind == "compiled" or not build.installed_copy():
        return  # the compiled core, or a source tree's pure one (editable: by choice)
    compiled_installed = build.compiled_core_installed()
    note = build.pure_core_note(kind=kind, installed=True, compiled_installed=compiled_installed)
    if note is not None:
        # Asked for (LOOPTRACE_PURE_PYTHON) it is news; an installation without it, a warning.
        _log.log(logging.INFO if compiled_installed else logging.WARNING, "%s", note)
