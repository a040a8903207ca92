"""What `configure()` checks of the interpreter: the core it runs.

An installed copy that runs the pure-Python core says once per process why, and how to get
the compiled one.
"""

from __future__ import annotations

import logging

from looptrace._core import build

_log = logging.getLogger("looptrace")
_noted = False


def check_interpreter() -> None:
    """Note a pure-Python core, once."""
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
