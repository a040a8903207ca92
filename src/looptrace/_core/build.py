"""Which core runs: the hot path compiled by mypyc at installation, or its pure-Python modules.

A compiled installation ships both: each compiled module's C extension and its `.py` source
beside it. Python's import system prefers the extension; `LOOPTRACE_PURE_PYTHON=1` in the
environment when looptrace is first imported makes it load the `.py` modules of `_core/` and
`_stats/` instead (and not the C helper of the compiled core), so one installation runs either
core. At installation time the same variable compiles nothing (`setup.py`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType

from looptrace._core.compiled import C_HELPER, COMPILED

PURE_VARIABLE = "LOOPTRACE_PURE_PYTHON"
# The modules that may load as C extensions: those mypyc compiles, and the C helper.
_EXTENSIONS = frozenset((*COMPILED, C_HELPER))
# The compiled module whose file says which core runs.
PROBE = "looptrace._core.engine"
_HERE = Path(__file__).parent  # looptrace/_core/


def pure_python_asked(environ: Mapping[str, str] = os.environ) -> bool:
    """Return whether `LOOPTRACE_PURE_PYTHON` asks for the pure-Python core (set, not "0")."""
    return environ.get(PURE_VARIABLE, "").strip() not in {"", "0"}


class PureFinder(MetaPathFinder):
    """Finds the `.py` source of a compiled module of the core, where the extension would load."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        """Return the spec of the `.py` module where the path finder would load a C extension.

        For anything else None: the usual finders decide.

        Raises:
            ModuleNotFoundError: `fullname` is the C helper, which the pure core never loads.

        """
        if fullname not in _EXTENSIONS:
            return None
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, ExtensionFileLoader) or not spec.origin:
            return None
        if fullname == C_HELPER:
            raise ModuleNotFoundError(
                f"{PURE_VARIABLE} is set: {fullname} not loaded", name=fullname
            )
        source = Path(spec.origin).with_name(fullname.rpartition(".")[2] + ".py")
        if not source.is_file():
            return None  # installed without its source: the extension it is
        return importlib.util.spec_from_file_location(fullname, source)


def select_core() -> None:
    """Load the pure-Python core from here on when `LOOPTRACE_PURE_PYTHON` asks for it.

    Called by `looptrace/__init__.py`, before any module of the core is imported.
    """
    if pure_python_asked() and not any(isinstance(f, PureFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, PureFinder())


def core_kind() -> str:
    """Return `"compiled"` when the hot path runs as C extensions, else `"pure Python"`."""
    probe = importlib.import_module(PROBE)  # the module whose file tells
    return "compiled" if _is_extension(probe.__file__) else "pure Python"


def compiled_core_installed() -> bool:
    """Return whether the compiled core lies beside the running modules (loaded or not)."""
    spec = PathFinder.find_spec(PROBE, [str(_HERE)])
    return spec is not None and _is_extension(spec.origin)


def installed_copy() -> bool:
    """Return whether looptrace runs from an installed copy, not from its source tree.

    An editable install (`pip install -e .`) or a source tree on `sys.path` (with or without
    the `.egg-info` a build leaves in it) runs the package's own files; an installed copy runs
    the files its distribution's RECORD lists.
    """
    from importlib import metadata  # noqa: PLC0415 - read only when asked (a slow import)

    try:
        distribution = metadata.distribution("looptrace")
    except metadata.PackageNotFoundError:
        return False
    record = distribution.read_text("RECORD") or ""  # none in a source tree's .egg-info
    if not any(line.startswith("looptrace/__init__.py,") for line in record.splitlines()):
        return False  # an editable install's RECORD lists its path hook, not the package
    listed = Path(str(distribution.locate_file("looptrace/__init__.py")))
    running = _HERE.parent / "__init__.py"
    return listed.is_file() and running.is_file() and listed.samefile(running)


def pure_core_note(*, kind: str, installed: bool, compiled_installed: bool) -> str | None:
    """Return why the pure-Python core runs in an installed copy, and how to get the compiled one.

    None where the compiled core runs, or where the pure one is a source tree's own.
    """
    if kind == "compiled" or not installed:
        return None
    cost = "each timed section costs five to six times what it costs compiled"
    if compiled_installed:
        return (
            f"looptrace runs its pure-Python core because {PURE_VARIABLE} is set ({cost}); "
            f"unset it to run the compiled core installed beside it"
        )
    return (
        f"looptrace runs its pure-Python core: this installation has no compiled core ({cost}). "
        "It is built at installation where a C compiler and the Python headers are at hand "
        f"and {PURE_VARIABLE} is not set; with them, reinstall without pip's cached wheel: "
        "`pip install --force-reinstall --no-deps --no-cache-dir <the same source>` "
        "(`looptrace --version` names the core that runs)"
    )


def _is_extension(file: str | None) -> bool:
    return (file or "").endswith(tuple(EXTENSION_SUFFIXES))
