"""Bad input to the offline commands: one-line errors (exit 1) or warnings, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from looptrace._cli import main

from .helpers.runs import record_run

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
    assert out.startswith("span files: 12 spans of 4 traced steps, rank 0, steps 0-3\n")


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
    assert _after_findings(out).startswith(expected)


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
    assert _after_findings(out).startswith("snapshot files: 4 windows")


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


def _snapshot_line(**changes: object) -> str:
    """Return a snapshot line with `changes` to its top-level fields or (as `stats`) stats."""
    record: dict[str, object] = {
        "kind": "looptrace.snapshot",
        "version": 1,
        "step": 9,
        "rank": 0,
        "world_size": 1,
        "host": "h",
        "stats": {"root.training": {"count": 2, "total": 0.2, "mean": 0.1, "buckets": [2]}},
    }
    record.update(changes)
    return json.dumps(record)


def _with_count(count: str) -> str:
    """Return a snapshot line whose count is the JSON text `count`."""
    line = _snapshot_line(stats={"root.training": {"count": "COUNT", "total": 0.2}})
    return line.replace('"COUNT"', count)


MALFORMED = "is a malformed snapshot record"
HOSTILE_SNAPSHOT_LINES = {
    "deep nesting": ("[" * 200_000, "skipped unreadable line 2"),
    "count Infinity": (_with_count("Infinity"), MALFORMED),
    "count 10**400": (_with_count("1" + "0" * 400), MALFORMED),
    "bucket 1e400": (
        _snapshot_line(stats={"root.training": {"count": 1, "buckets": ["B"]}}).replace(
            '"B"', "1e400"
        ),
        MALFORMED,
    ),
    "across_ranks of the wrong shape": (
        _snapshot_line(across_ranks={"root.training": [1, 2]}),
        MALFORMED,
    ),
    "across_ranks mean of the wrong type": (
        _snapshot_line(across_ranks={"root.training": {"mean": {"min": "x", "max": 1}}}),
        MALFORMED,
    ),
    "rates_across_ranks of the wrong shape": (
        _snapshot_line(rates_across_ranks={"root.training": {"tokens": [1, 2]}}),
        MALFORMED,
    ),
    "rates_across_ranks with a rank below 0": (
        _snapshot_line(
            rates_across_ranks={
                "root.training": {
                    "tokens": {"ranks": 2, "total": 1, "per_s": 1, "slowest_rank": -1}
                }
            }
        ),
        MALFORMED,
    ),
    "step 1e300": (_snapshot_line(step=1e300), MALFORMED),
    "stats not an object": (_snapshot_line(stats=[1, 2]), MALFORMED),
}


@pytest.mark.parametrize("command", ["summary", "plot"])
@pytest.mark.parametrize("case", sorted(HOSTILE_SNAPSHOT_LINES))
def test_a_hostile_snapshot_line_is_skipped_with_one_warning(
    command: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each hostile line: one warning naming file and line; every other window is used."""
    run = record_run(tmp_path, data_ms=(10, 20, 30, 40), reset_every=1)
    lines = run.snapshot_file.read_text().splitlines()
    line, problem = HOSTILE_SNAPSHOT_LINES[case]
    lines.insert(1, line)
    run.snapshot_file.write_text("\n".join(lines) + "\n")
    code, out, err = _run(capsys, command, tmp_path, run.snapshot_file)
    assert code == 0
    (warning,) = err.splitlines()
    assert warning.startswith(f"looptrace {command}: warning: {run.snapshot_file}: ")
    assert problem in warning and "line 2" in warning
    assert "4 windows, rank 0, steps 0-3" in out


@pytest.mark.parametrize("command", ["summary", "plot"])
def test_a_hostile_flat_metrics_line_is_skipped(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flat-metrics count of Infinity: one warning; the other lines are summarized."""
    path = tmp_path / "metrics.jsonl"
    good = '{"step": %d, "timing.root.training.count": 2, "timing.root.training.mean": 0.1}'
    path.write_text("\n".join([good % 1, good.replace("2,", "Infinity,") % 2, good % 3]) + "\n")
    code, out, err = _run(capsys, command, tmp_path, path)
    assert (code, err) == (
        0,
        f"looptrace {command}: warning: {path}: line 2 is a malformed metrics record "
        "(timing.root.training.count is not a whole number from 0 to 2**63); skipped\n",
    )
    assert "2 windows, rank 0, closed at steps 1-3" in out


def test_a_metrics_file_without_steps_names_no_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Flat metrics lines with no `step` key: the summary counts windows, not line numbers."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"timing.root.training.count": 2, "timing.root.training.mean": 0.1}\n' * 3)
    code, out, err = _run(capsys, "summary", tmp_path, path)
    assert (code, err, out.splitlines()[0]) == (0, "", "metrics files: 3 windows, rank 0")


@pytest.mark.parametrize("command", ["summary", "plot", "perfetto"])
def test_a_span_of_other_instrumentation_named_empty_is_shown_not_fatal(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A span named "" without `looptrace.path` is drawn as "(unnamed)"; nothing recurses."""
    run = record_run(tmp_path, data_ms=(10, 20))
    record = json.loads(run.span_file.read_text().splitlines()[0])
    span = record["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span.update(name="", attributes=[], parentSpanId="", spanId="00000000000000aa")
    record["resourceSpans"][0]["scopeSpans"][0]["spans"] = [span]  # the others are read already
    with run.span_file.open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    code, out, err = _run(capsys, command, tmp_path, run.span_file)
    assert (code, err) == (0, "")
    if command == "summary":
        assert "(unnamed)" in out


def test_a_hostile_span_line_is_skipped_with_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An out-of-range step attribute and deep nesting: a warning each; the rest is used."""
    run = record_run(tmp_path, data_ms=(10, 20))
    good = run.span_file.read_text().splitlines()
    bad = good[0].replace('"intValue":"0"}}]', '"intValue":"99999999999999999999"}}]', 1)
    run.span_file.write_text("\n".join([good[0], bad, "[" * 200_000, *good[1:]]) + "\n")
    code, out, err = _run(capsys, "perfetto", tmp_path, run.span_file)
    assert code == 0
    invalid, unreadable = err.splitlines()
    assert invalid.startswith(
        f"looptrace perfetto: warning: {run.span_file}: line 2 is not a valid OTLP/JSON request ("
    )
    assert invalid.endswith("; skipped")
    assert unreadable == f"looptrace perfetto: warning: {run.span_file}: skipped unreadable line 3"
    assert "6 spans of 1 rank" in out


def test_a_snapshot_line_with_only_some_fields_is_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Missing statistics and buckets are undefined, not malformed: no warning."""
    path = tmp_path / "snapshots.jsonl"
    path.write_text(_snapshot_line(stats={"root.t": {"count": 3, "total": 0.3}}) + "\n")
    code, out, err = _run(capsys, "summary", tmp_path, path)
    assert (code, err, out.splitlines()[0]) == (
        0,
        "",
        "snapshot files: 1 window, rank 0, closed at step 9",
    )


def _after_findings(out: str) -> str:
    """Return the summary after its findings part, if it has one (an input-bound run)."""
    return out.split("\n\n", 1)[1] if out.startswith("findings") else out
