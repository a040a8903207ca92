"""The `files` extra's line (`_export/extras.py`): span files can be neither read nor written."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from looptrace import ConfigError
from looptrace._export.extras import FILES_EXTRA_MISSING, needs_files_extra
from looptrace._export.files import OtlpJsonFileExporter
from looptrace._offline.reader import InputError


def test_the_guard_turns_a_missing_module_into_one_line() -> None:
    """An import that fails in the guard raises the given error with the install line."""
    with pytest.raises(InputError) as raised, needs_files_extra(InputError):
        import looptrace_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert str(raised.value) == FILES_EXTRA_MISSING
    assert FILES_EXTRA_MISSING.endswith("pip install 'looptrace[files]'")


def test_the_guard_lets_other_errors_through() -> None:
    """Only an ImportError is the extra's absence; anything else is raised as it is."""
    with pytest.raises(KeyError), needs_files_extra(InputError):
        raise KeyError("other")


def test_a_trace_file_without_the_extra_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trace_file` without the OTLP protocol classes: a ConfigError naming it and the extra."""
    monkeypatch.setitem(sys.modules, "looptrace._export.otlp_json", None)
    with pytest.raises(ConfigError) as raised:
        OtlpJsonFileExporter(tmp_path / "spans.jsonl")
    assert str(raised.value) == f"trace_file: {FILES_EXTRA_MISSING}"
    assert not (tmp_path / "spans.jsonl").exists()
