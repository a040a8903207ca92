"""Bad input to the offline commands: one-line errors (exit 1) or warnings, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from looptrace._cli import main

from .runs import record_run

COMMANDS = ["summary", "perfetto", "plot", "replay"]


def _args(command: str, tmp_path: Path) -> list[str]:
    """Return the options a command needs besides its files."""
    return {
        "summary": [],
        "perfetto": ["-o", str(tmp_path / "trace.json")],
        "plot": ["-o", str(tmp_path / "timings.png")],
        "replay": ["--endpoint", "http://127.0.0.1:9"],
    }[command]


def _run(
    capsys: pytest.CaptureFixture[str], command: str, tmp_path: Path, *files: Path | str
) -> tuple[int, str, str]:
    code = main([command, *map(str, files), *_args(command, tmp_path)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_file(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that does not exist is named in a one-line error."""
    missing = tmp_path / "nope.jsonl"
    assert _run(capsys, command, tmp_path, missing) == (
        1,
        "",
        f"looptrace {command}: error: {missing}: no such file\n",
    )


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("step,loss\n1,0.5\n", "line 1 is not JSON; expected looptrace span, snapshot or metrics"),
        ('{"loss": 0.5, "step": 1}\n', "not a looptrace span, snapshot or metrics file (line 1 "),
        ("\x89PNG\r\n\x1a\n\x00\x00", "line 1 is not JSON"),
    ],
)
def test_file_of_another_format(
    command: str, content: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CSV, a JSON-lines file of other records, or a binary file: one-line error naming it."""
    other = tmp_path / "other.jsonl"
    other.write_text(content)
    code, out, err = _run(capsys, command, tmp_path, other)
    assert (code, out) == (1, "")
    assert err.startswith(f"looptrace {command}: error: {other}: {problem}")
    assert err.count("\n") == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_empty_file_alone_is_an_error(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty file is skipped with a warning; with nothing else to read, that is an error."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert _run(capsys, command, tmp_path, empty) == (
        1,
        "",
        f"looptrace {command}: warning: {empty}: empty; skipped\n"
        f"looptrace {command}: error: no records in {empty}\n",
    )


def test_empty_file_beside_good_ones_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty rank file among good ones (a rank that died early) only warns."""
    run = record_run(tmp_path)
    empty = tmp_path / "spans.rank1.jsonl"
    empty.write_text("")
    code, out, err = _run(capsys, "summary", tmp_path, run.span_file, empty)
    assert (code, err) == (0, f"looptrace summary: warning: {empty}: empty; skipped\n")
    assert out.startswith("span files: 12 spans, rank 0, steps 0-3\n")


@pytest.mark.parametrize("kind", ["span", "snapshot"])
def test_truncated_last_line_is_skipped_with_a_warning(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A killed writer's half line at the end: a warning, and every complete line is used."""
    run = record_run(tmp_path, data_ms=(10, 20))
    path = run.span_file if kind == "span" else run.snapshot_file
    complete = len(path.read_text().splitlines())
    with path.open("a") as handle:
        handle.write('{"resourceSpans":[{"resource":{"attri')
    code, out, err = _run(capsys, "summary", tmp_path, path)
    assert code == 0
    assert err == (
        f"looptrace summary: warning: {path}: line {complete + 1} is truncated "
        "(a writer killed mid-line?); skipped\n"
    )
    expected = "span files: 6 spans" if kind == "span" else "snapshot files: 1 window"
    assert out.startswith(expected)


def test_a_file_holding_only_a_truncated_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A writer killed during its first line: a warning for the file, an error for the run."""
    path = tmp_path / "spans.jsonl"
    path.write_text('{"resourceSpans":[{"reso')
    assert _run(capsys, "summary", tmp_path, path) == (
        1,
        "",
        f"looptrace summary: warning: {path}: only a truncated line (a writer killed "
        "mid-line?); skipped\n"
        f"looptrace summary: error: no records in {path}\n",
    )


def test_corrupt_lines_in_the_middle_are_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unreadable lines after the first are skipped and listed in one warning."""
    run = record_run(tmp_path, data_ms=(10, 20, 30, 40), reset_every=1)
    lines = run.snapshot_file.read_text().splitlines()
    lines[1:1] = ["garbage", '{"kind": "something else"}']
    run.snapshot_file.write_text("\n".join(lines) + "\n")
    code, out, err = _run(capsys, "summary", tmp_path, run.snapshot_file)
    assert (code, err) == (
        0,
        f"looptrace summary: warning: {run.snapshot_file}: skipped unreadable lines 2, 3\n",
    )
    assert out.startswith("snapshot files: 4 windows")


@pytest.mark.parametrize("command", ["summary", "perfetto", "plot"])
def test_unknown_rank_filter(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--rank naming a rank that is not in the files: a one-line error listing the ranks."""
    run = record_run(tmp_path)
    code = main([command, str(run.span_file), "--rank", "0,5", *_args(command, tmp_path)])
    assert (code, capsys.readouterr().err) == (
        1,
        f"looptrace {command}: error: no rank 5 in the input (ranks: 0)\n",
    )


def test_malformed_options_exit_with_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rank that is not a number or a bad --size: argparse's exit 2 and a reason."""
    for argv, reason in [
        (["summary", "f", "--rank", "x"], "not a comma-separated list of ranks: 'x'"),
        (["plot", "f", "-o", "p.png", "--size", "big"], "expected WIDTHxHEIGHT"),
        (["summary", "f", "--since-step", "-1"], "must be >= 0, got -1"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert reason in capsys.readouterr().err


def test_mixed_kinds_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A span file and a snapshot file together: one error naming each file's kind."""
    run = record_run(tmp_path)
    code, _, err = _run(capsys, "summary", tmp_path, run.span_file, run.snapshot_file)
    assert (code, err) == (
        1,
        f"looptrace summary: error: cannot mix files of different kinds: {run.span_file} is a "
        f"span file, {run.snapshot_file} is a snapshot file\n",
    )


def test_replay_needs_an_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --endpoint or OTEL_EXPORTER_OTLP_ENDPOINT, replay says what is missing."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    run = record_run(tmp_path)
    assert main(["replay", str(run.span_file)]) == 1
    assert capsys.readouterr().err == (
        "looptrace replay: error: no --endpoint given and OTEL_EXPORTER_OTLP_ENDPOINT is not set\n"
    )


def test_unwritable_output_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output in a directory that does not exist: the OS reason, on one line."""
    run = record_run(tmp_path)
    target = tmp_path / "missing-dir" / "trace.json"
    assert main(["perfetto", str(run.span_file), "-o", str(target)]) == 1
    assert capsys.readouterr().err == (
        f"looptrace perfetto: error: {target}: No such file or directory\n"
    )


@pytest.mark.parametrize("command", ["demo", *COMMANDS])
def test_every_command_has_help_with_an_example(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`looptrace <command> --help` describes the command and ends with an example."""
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: looptrace {command} ")
    assert f"example: looptrace {command} " in out


def test_a_step_filter_that_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--since-step past the last step: a one-line error, not an empty table."""
    run = record_run(tmp_path)
    assert main(["summary", str(run.span_file), "--since-step", "99"]) == 1
    assert capsys.readouterr().err == "looptrace summary: error: nothing at step 99 or later\n"
