"""The source tree's shape: the compiled set declared once, small modules, no name twice."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections import Counter
from importlib.machinery import EXTENSION_SUFFIXES, PathFinder
from pathlib import Path
from typing import Any

import pytest

from looptrace._core import build
from looptrace._core.compiled import C_HELPER, COMPILED

from .helpers.processes import bare_env

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "looptrace"
MAX_LINES = 500


def _source_of(module: str, suffix: str = ".py") -> Path:
    return ROOT / "src" / Path(*module.split(".")).with_suffix(suffix)


def test_every_compiled_module_exists() -> None:
    """Each module of `COMPILED` is a `.py` file of `_core/` or `_stats/`, named once."""
    assert len(set(COMPILED)) == len(COMPILED)
    for module in COMPILED:
        assert module.startswith(("looptrace._core.", "looptrace._stats.")), module
        assert _source_of(module).is_file(), module
    assert _source_of(C_HELPER, ".c").is_file()


def test_setup_py_reads_the_declared_set() -> None:
    """setup.py's reader of `_core/compiled.py` returns the set the package declares."""
    setup = ROOT / "setup.py"
    tree = ast.parse(setup.read_text(encoding="utf-8"))
    reader = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_declared")
    namespace: dict[str, Any] = {"ast": ast, "Any": Any, "HERE": ROOT}
    exec(compile(ast.Module(body=[reader], type_ignores=[]), str(setup), "exec"), namespace)
    assert tuple(namespace["_declared"]("COMPILED")) == COMPILED
    assert namespace["_declared"]("C_HELPER") == C_HELPER
    assert "_core/calls" not in setup.read_text(encoding="utf-8")  # no second list


def test_the_core_is_told_by_a_compiled_module() -> None:
    """`core_kind()` and `compiled_core_installed()` look at a module of the compiled set."""
    assert build.PROBE in COMPILED


def test_an_installed_compiled_core_is_the_declared_set() -> None:
    """Where the compiled core is installed, exactly the declared modules are C extensions."""
    if not build.compiled_core_installed():
        pytest.skip("the pure-Python core is installed: nothing was compiled")
    package = Path(build.__file__).parents[1]
    found = {
        f"looptrace.{folder}.{path.name.split('.')[0]}"
        for folder in ("_core", "_stats")
        for path in (package / folder).iterdir()
        if path.name.endswith(tuple(EXTENSION_SUFFIXES))
    }
    assert found == {*COMPILED, C_HELPER}
    for module in COMPILED:
        spec = PathFinder.find_spec(module, [str(package / module.split(".")[1])])
        assert spec is not None and spec.origin is not None, module
        assert spec.origin.endswith(tuple(EXTENSION_SUFFIXES)), module


def test_the_pure_core_loads_every_compiled_module_from_source() -> None:
    """With LOOPTRACE_PURE_PYTHON=1 every module of the declared set loads from its `.py`."""
    code = f"""
        import importlib, json, looptrace
        print(json.dumps([importlib.import_module(m).__file__ for m in {list(COMPILED)!r}]))
    """
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        env=bare_env({"LOOPTRACE_PURE_PYTHON": "1"}),
        timeout=60,
    )
    files = json.loads(child.stdout)
    assert [Path(f).suffix for f in files] == [".py"] * len(COMPILED)


def test_no_module_is_over_500_lines() -> None:
    """Every module of the package has at most 500 lines: one concept each."""
    long = {
        str(path.relative_to(SOURCE)): lines
        for path in SOURCE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_two_modules_share_a_name() -> None:
    """A module's name says what it holds: no name is used in two subpackages."""
    names = Counter(path.name for path in SOURCE.rglob("*.py") if path.name != "__init__.py")
    assert [name for name, count in names.items() if count > 1] == []
