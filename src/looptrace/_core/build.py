"""Which core runs: the hot path compiled by mypyc at installation, or its pure-Python modules."""

from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES

from looptrace._core import engine


def core_kind() -> str:
    """Return `"compiled"` when the hot path runs as C extensions, else `"pure Python"`."""
    compiled = (engine.__file__ or "").endswith(tuple(EXTENSION_SUFFIXES))
    return "compiled" if compiled else "pure Python"
