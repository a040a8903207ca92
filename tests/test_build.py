"""Which core runs (`_core/build.py`): LOOPTRACE_PURE_PYTHON at import, and configure()'s note."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from looptrace._configure import interpreter
from looptrace._core import build

from .helpers.processes import bare_env

# In a child: the core that runs, where its modules come from, and the C helper's absence.
WHICH_CORE = """
    import json, looptrace
    from looptrace._core import build, engine, threadkey
    from looptrace._stats import aggregator
    print(json.dumps([build.core_kind(), engine.__file__.endswith(".py"),
                      aggregator.__file__.endswith(".py"), threadkey._HELPER is None]))
"""


def child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a new interpreter with only `env` (and this run's PYTHONPATH) set."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        env=bare_env(env),
        timeout=60,
    )


@pytest.mark.parametrize(
    ("value", "asked"),
    [("1", True), (" 1 ", True), ("yes", True), ("0", False), ("", False), (None, False)],
)
def test_pure_python_is_asked_by_any_value_but_0(value: str | None, asked: bool) -> None:
    """`LOOPTRACE_PURE_PYTHON` asks for the pure core when set to anything but "0" or nothing."""
    environ = {} if value is None else {build.PURE_VARIABLE: value}
    assert build.pure_python_asked(environ) is asked


def test_the_variable_loads_the_pure_core_at_import() -> None:
    """With LOOPTRACE_PURE_PYTHON=1 at import even a compiled installation runs `.py` modules."""
    pure = json.loads(child(WHICH_CORE, LOOPTRACE_PURE_PYTHON="1").stdout)
    assert pure == ["pure Python", True, True, True]
    version = child(
        "from looptrace._cli import main; main(['--version'])", LOOPTRACE_PURE_PYTHON="1"
    )
    assert version.stdout.endswith("(pure Python core)\n")


def test_without_the_variable_the_installed_core_runs() -> None:
    """Unset or "0", the core of the installation runs: compiled where it was compiled."""
    compiled = build.compiled_core_installed()
    expected = ["compiled" if compiled else "pure Python", *[not compiled] * 3]
    assert json.loads(child(WHICH_CORE).stdout) == expected
    assert json.loads(child(WHICH_CORE, LOOPTRACE_PURE_PYTHON="0").stdout) == expected


def test_the_running_core_is_the_installed_one_unless_asked() -> None:
    """In this process the compiled core runs exactly when it is installed and not refused."""
    compiled = build.compiled_core_installed() and not build.pure_python_asked()
    assert build.core_kind() == ("compiled" if compiled else "pure Python")


def test_the_runs_of_ci_are_a_source_tree_and_an_installed_copy() -> None:
    """CI's pure run (an editable install) is no installed copy; its compiled run (a wheel) is."""
    expected = os.environ.get("LOOPTRACE_EXPECT_CORE")  # .ci/run sets it for each of its runs
    if expected is None:
        pytest.skip("LOOPTRACE_EXPECT_CORE names the run")
    assert build.installed_copy() is (expected == "compiled")


def test_a_source_trees_egg_info_is_no_installed_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metadata without a RECORD that lists the package (a build's `.egg-info`) is no install.

    The metadata lies beside the running package (a link to it), as in a built source tree.
    """
    (tmp_path / "looptrace").symlink_to(Path(build.__file__).parents[1], target_is_directory=True)
    egg_info = tmp_path / "looptrace.egg-info"
    egg_info.mkdir()
    (egg_info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: looptrace\nVersion: 0.1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not build.installed_copy()


def test_no_note_for_the_compiled_core_or_a_source_tree() -> None:
    """The compiled core, or the pure one of a source tree (editable install), needs no note."""
    for kind, installed in [("compiled", True), ("compiled", False), ("pure Python", False)]:
        for compiled_installed in (True, False):
            note = build.pure_core_note(
                kind=kind, installed=installed, compiled_installed=compiled_installed
            )
            assert note is None


def test_the_note_says_why_and_how() -> None:
    """An installed pure core names the variable, or the missing compiler and the reinstall."""
    asked = build.pure_core_note(kind="pure Python", installed=True, compiled_installed=True)
    assert asked == (
        "looptrace runs its pure-Python core because LOOPTRACE_PURE_PYTHON is set (each timed "
        "section costs five to six times what it costs compiled); unset it to run the compiled "
        "core installed beside it"
    )
    missing = build.pure_core_note(kind="pure Python", installed=True, compiled_installed=False)
    assert missing is not None
    assert missing.startswith("looptrace runs its pure-Python core: this installation has no ")
    for part in ("C compiler and the Python headers", "LOOPTRACE_PURE_PYTHON", "--no-cache-dir"):
        assert part in missing


@pytest.mark.parametrize(("compiled_installed", "level"), [(True, "INFO"), (False, "WARNING")])
def test_configure_notes_an_installed_pure_core_once(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    compiled_installed: bool,
    level: str,
) -> None:
    """An installed copy running the pure core logs why once per process, at every configure().

    INFO when LOOPTRACE_PURE_PYTHON asked for it, WARNING when the installation lacks the
    compiled core.
    """
    monkeypatch.setattr(interpreter, "_noted", False)
    monkeypatch.setattr(build, "core_kind", lambda: "pure Python")
    monkeypatch.setattr(build, "installed_copy", lambda: True)
    monkeypatch.setattr(build, "compiled_core_installed", lambda: compiled_installed)
    with caplog.at_level(logging.INFO, logger="looptrace"):
        interpreter.check_interpreter()
        interpreter.check_interpreter()
    expected = build.pure_core_note(
        kind="pure Python", installed=True, compiled_installed=compiled_installed
    )
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [(level, expected)]


def test_configure_in_a_child_notes_what_its_installation_runs() -> None:
    """A real configure() with LOOPTRACE_PURE_PYTHON=1 notes it once in an installed copy.

    That is CI's compiled run; in a source tree (the editable run) it says nothing.
    """
    code = """
        import logging, looptrace
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        for _ in range(2):
            looptrace.configure().shutdown()
    """
    logged = child(code, LOOPTRACE_PURE_PYTHON="1").stderr.splitlines()
    notes = [line for line in logged if "pure-Python core" in line]
    if build.installed_copy():
        note = build.pure_core_note(kind="pure Python", installed=True, compiled_installed=True)
        assert notes == [f"INFO {note}"]
    else:
        assert notes == []
