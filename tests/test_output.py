"""Where `perfetto` and `plot` write: never over an input, never over a file they did not write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from looptrace._cli import main

from .helpers.runs import Run, record_run

WRITERS = ["perfetto", "plot"]


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """Record a run: its span and snapshot files."""
    return record_run(tmp_path)


@pytest.mark.parametrize("how", ["same path", "symlink", "hard link", "relative path"])
@pytest.mark.parametrize("command", WRITERS)
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
    command: str,
    how: str,
    run: Run,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`-o` naming an input file (by any name, even with --force): exit 1, input untouched."""
    source = run.span_file
    tmp_path = source.parent
    before = source.read_bytes()
    if how == "same path":
        output = source
    elif how == "symlink":
        output = tmp_path / "link.json"
        output.symlink_to(source)
    elif how == "hard link":
        output = tmp_path / "hard.json"
        os.link(source, output)
    else:
        monkeypatch.chdir(tmp_path)
        output = Path(".") / ".." / tmp_path.name / source.name
    for force in ([], ["--force"]):
        assert main([command, str(source), "-o", str(output), *force]) == 1
        captured = capsys.readouterr()
        assert captured.err == (
            f"looptrace {command}: error: {output} is one of the input files; "
            "choose another output\n"
        )
        assert captured.out == ""
        assert source.read_bytes() == before


@pytest.mark.parametrize("command", WRITERS)
def test_a_foreign_file_is_kept_without_force(
    command: str, run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file looptrace did not write is refused in one line, and replaced with --force."""
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    assert main([command, str(run.span_file), "-o", str(other)]) == 1
    assert capsys.readouterr().err == (
        f"looptrace {command}: error: {other} exists and is not a looptrace output; "
        "pass --force to overwrite it\n"
    )
    assert other.read_text() == "my notes\n"
    assert main([command, str(run.span_file), "-o", str(other), "--force"]) == 0
    assert other.read_bytes() != b"my notes\n"


@pytest.mark.parametrize("command", WRITERS)
def test_its_own_output_and_an_empty_file_are_rewritten(
    command: str, run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Running the same command twice, or into an empty file, needs no --force."""
    output = tmp_path / "out"
    output.touch()
    assert main([command, str(run.span_file), "-o", str(output)]) == 0
    first = output.read_bytes()
    assert first
    assert main([command, str(run.span_file), "-o", str(output)]) == 0
    assert output.read_bytes() == first
    assert capsys.readouterr().err == ""


def test_a_trace_is_not_taken_for_a_png_nor_the_reverse(
    run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command recognises only its own kind of output as replaceable."""
    trace, png = tmp_path / "trace.json", tmp_path / "plot.png"
    assert main(["perfetto", str(run.span_file), "-o", str(trace)]) == 0
    assert main(["plot", str(run.span_file), "-o", str(png)]) == 0
    assert main(["plot", str(run.span_file), "-o", str(trace)]) == 1
    assert main(["perfetto", str(run.span_file), "-o", str(png)]) == 1
    assert capsys.readouterr().err.count("is not a looptrace output") == 2
