"""How inputs are named and read: files, directories, quoted globs; bad lines anywhere alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from looptrace._cli import main

from .helpers.runs import record_run


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", ["summary", "plot", "perfetto"])
def test_a_directory_and_a_quoted_glob_name_files_for_every_command(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`summary`, `plot` and `perfetto` take a directory or a glob as `report` does: span files."""
    run = record_run(tmp_path / "run")
    output = [] if command == "summary" else ["-o", tmp_path / f"out.{command}", "--force"]
    named = _run(capsys, command, run.span_file, *output)
    for name in (tmp_path / "run", f"{tmp_path}/run/*.jsonl", f"{tmp_path}/**/spans*.jsonl"):
        code, out, err = _run(capsys, command, name, *output)
        assert (code, out) == named[:2], name
        left_out = f"{run.snapshot_file}: not span files; left out (name them alone to read them)\n"
        assert err in ("", f"looptrace {command}: warning: {left_out}"), name


def test_a_glob_that_matches_nothing_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A glob matching no file: a warning naming it, then the one-line error of no records."""
    code, out, err = _run(capsys, "summary", f"{tmp_path}/*.jsonl")
    assert (code, out) == (1, "")
    assert err == (
        f"looptrace summary: warning: {tmp_path}/*.jsonl: no file matches; skipped\n"
        f"looptrace summary: error: no records in {tmp_path}/*.jsonl\n"
    )


def test_a_foreign_file_inside_a_directory_is_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory's JSON-lines file of other records is skipped with a warning, not fatal."""
    run = record_run(tmp_path)
    (tmp_path / "other.jsonl").write_text('{"loss": 0.5}\n')
    alone = _run(capsys, "summary", run.snapshot_file)
    (run.span_file).unlink()
    code, out, err = _run(capsys, "summary", tmp_path)
    assert (code, out) == alone[:2]
    assert err == (
        f"looptrace summary: warning: {tmp_path}/other.jsonl: not a looptrace span, snapshot or "
        "metrics file (line 1 has keys: loss); skipped\n"
    )


@pytest.mark.parametrize(
    "bad",
    [
        b'{"kind": "looptrace.snap\n',  # a partial line: the end of a line cut at its start
        b"\x00\xff garbage\n",
        b"[" * 100_000 + b"]" * 100_000 + b"\n",  # deeper than any JSON parser recurses
        b"17\n",  # JSON, but not a record
    ],
    ids=["partial", "garbage", "deep", "number"],
)
@pytest.mark.parametrize("which", ["span_file", "snapshot_file"])
def test_a_bad_first_line_is_skipped_like_any_other(
    which: str, bad: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad first line: skipped with the one-line warning a bad middle line gets, not fatal."""
    path = getattr(record_run(tmp_path), which)
    good = path.read_bytes()
    first, rest = good.split(b"\n", 1)
    alone = _run(capsys, "summary", path)
    for content, number in ((bad + good, 1), (first + b"\n" + bad + rest, 2)):
        path.write_bytes(content)
        code, out, err = _run(capsys, "summary", path)
        assert (code, out) == alone[:2]
        assert err == f"looptrace summary: warning: {path}: skipped unreadable line {number}\n"


def test_a_file_of_bad_lines_only_is_still_not_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file none of whose lines is JSON is named as not JSON lines (not read as empty)."""
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"garbage\n" + json.dumps({"x": 1}).encode()[:-1] + b"\n")
    code, _, err = _run(capsys, "summary", path)
    assert (code, err) == (
        1,
        f"looptrace summary: error: {path}: line 1 is not JSON; expected looptrace span, "
        "snapshot or metrics JSON lines (and no line is one)\n",
    )
