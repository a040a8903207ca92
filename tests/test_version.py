"""The version comes from the package metadata, read only when asked; which core runs."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import subprocess
import sys
import threading
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import looptrace
from looptrace._cli import main
from looptrace._core import engine
from looptrace._core.build import core_kind
from looptrace._core.threadkey import thread_key

SRC = Path(looptrace.__file__).parent


def test_version_is_the_distribution_metadata() -> None:
    """`__version__` is what pip installed from pyproject.toml, also via `from ... import`."""
    from looptrace import __version__

    assert looptrace.__version__ == __version__ == importlib.metadata.version("looptrace")


def test_unknown_attribute_is_an_attribute_error() -> None:
    """The module `__getattr__` answers only `__version__`."""
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = looptrace.nope  # type: ignore[attr-defined]


def test_cli_version_prints_the_metadata_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`looptrace --version` prints `looptrace <version> (<core> core)` on stdout and exits 0."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert (exit_info.value.code, capsys.readouterr().out) == (
        0,
        f"looptrace {importlib.metadata.version('looptrace')} ({core_kind()} core)\n",
    )


def test_core_kind_is_the_core_that_runs() -> None:
    """The core named is the one imported: C extensions or .py modules (CI expects each)."""
    compiled = (engine.__file__ or "").endswith(tuple(EXTENSION_SUFFIXES))
    assert core_kind() == ("compiled" if compiled else "pure Python")
    expected = os.environ.get("LOOPTRACE_EXPECT_CORE")  # .ci/run sets it for each of its runs
    if expected is not None:
        assert core_kind() == expected


def test_the_compiled_core_tells_threads_apart_by_their_thread_state_id() -> None:
    """Compiled, a thread's key is its thread state's unique id (C helper); else its ident."""
    if core_kind() == "compiled":
        from looptrace._core._threaddict import key

        assert thread_key() == key() == key()
        assert isinstance(key(), int)
    else:
        assert thread_key() == threading.get_ident()


def test_a_thread_key_is_steady_in_its_thread_and_differs_between_live_threads() -> None:
    """Every call in a thread gives its key; two threads alive at once never share one."""
    keys: list[tuple[int, int]] = []
    both_alive = threading.Barrier(2)

    def ask() -> None:
        first = thread_key()
        both_alive.wait()
        keys.append((first, thread_key()))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(keys) == 2
    assert all(first == again for first, again in keys)
    assert keys[0][0] != keys[1][0]
    assert thread_key() not in {keys[0][0], keys[1][0]}


def test_no_module_imports_the_version_from_the_package() -> None:
    """Modules read `_version.version()`: importing `__version__` back from `looptrace` cycles."""
    offenders = [
        f"{path.name}:{node.lineno}"
        for path in sorted(SRC.glob("**/*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and node.module == "looptrace"
        and any(alias.name == "__version__" for alias in node.names)
    ]
    assert offenders == []


def test_import_reads_no_metadata() -> None:
    """`import looptrace` loads no `importlib.metadata`; the version is read on first use."""
    code = "import sys, looptrace; print('importlib.metadata' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "False"
