"""Count nothing twice: windows and spans read twice, and a rank claimed by two processes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from looptrace._cli import main
from looptrace._offline.reader import open_inputs
from looptrace._offline.watch import Watcher
from looptrace._offline.window_records import load_windows

from .helpers.runs import record_run
from .helpers.writers import record_in_another_process


def _summary(capsys: pytest.CaptureFixture[str], *files: Path | str) -> tuple[str, str]:
    assert main(["summary", *map(str, files)]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


@pytest.mark.parametrize("which", ["span_file", "snapshot_file"])
def test_a_copy_of_a_file_counts_once(
    which: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same records through a copy in another directory: the summary of one, one warning."""
    run = record_run(tmp_path / "a")
    original = getattr(run, which)
    copy = tmp_path / "b" / original.name
    copy.parent.mkdir()
    shutil.copy(original, copy)
    alone, _ = _summary(capsys, original)
    out, err = _summary(capsys, original, copy)
    noun = "span" if which == "span_file" else "window"
    count = 12 if which == "span_file" else 2
    assert (out, err) == (
        alone,
        f"looptrace summary: warning: {count} duplicate {noun}s (read twice: a file named "
        "twice or copied); counted once\n",
    )


def test_a_file_named_twice_is_read_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`summary f f` and `summary dir dir/f`: the summary of `f`, one warning naming it."""
    run = record_run(tmp_path)
    alone, _ = _summary(capsys, run.snapshot_file)
    out, err = _summary(capsys, run.snapshot_file, run.snapshot_file)
    assert (out, err) == (
        alone,
        f"looptrace summary: warning: {run.snapshot_file}: named more than once; read once\n",
    )
    out, err = _summary(capsys, tmp_path / "snapshots.jsonl", tmp_path)
    assert out.endswith(alone.split(": ", 1)[1])
    assert f"{tmp_path}/snapshots.jsonl: named more than once; read once" in err


def test_old_snapshot_lines_are_told_apart_by_their_times(tmp_path: Path) -> None:
    """Lines written without `writer` and `window`: duplicates found by rank, step and times."""
    run = record_run(tmp_path / "a")
    lines = [json.loads(line) for line in run.snapshot_file.read_text().splitlines()]
    for line in lines:
        del line["writer"], line["window"]
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(line) + "\n" for line in lines * 2))
    warnings: list[str] = []
    kind, files = open_inputs([str(old)], warnings.append)
    assert len(load_windows(kind, files, warnings.append)) == len(lines)
    assert warnings == [
        f"{len(lines)} duplicate windows (read twice: a file named twice or copied); counted once"
    ]


@pytest.mark.slow
def test_two_processes_claiming_one_rank_are_named_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two processes append rank 0's files: both writers named, neither's records dropped."""
    record_in_another_process(tmp_path)
    record_in_another_process(tmp_path)
    snapshots = [
        json.loads(line) for line in (tmp_path / "snapshots.jsonl").read_text().splitlines()
    ]
    writers = list(dict.fromkeys(line["writer"] for line in snapshots))
    assert len(writers) == 2
    out, err = _summary(capsys, tmp_path / "snapshots.jsonl")
    assert err == (
        f"looptrace summary: warning: rank 0 was written by 2 processes ({writers[0]} on "
        f"{snapshots[0]['host']} and {writers[1]} on {snapshots[0]['host']}): two processes "
        "given the same RANK? Their records are kept apart, not counted as duplicates\n"
    )
    assert "snapshot files: 4 windows, rank 0" in out
    out, err = _summary(capsys, tmp_path / "spans.jsonl")
    assert "rank 0 was written by 2 processes (" in err and "duplicate span" not in err
    assert "span files: 24 spans of 4 traced steps, rank 0" in out


def test_watch_counts_a_copied_window_once(tmp_path: Path) -> None:
    """`watch` of a file and its copy: each window counted once, one warning when first seen."""
    run = record_run(tmp_path / "a")
    copy = tmp_path / "b" / "snapshots.jsonl"
    copy.parent.mkdir()
    shutil.copy(run.snapshot_file, copy)
    warnings: list[str] = []
    watcher = Watcher([f"{tmp_path}/*/snapshots.jsonl"], warnings.append, lambda: 0.0)
    assert watcher.poll() == 2
    with copy.open("a") as handle:
        handle.write(run.snapshot_file.read_text())
    assert watcher.poll() == 0
    assert (watcher.state.windows, warnings) == (
        2,
        ["duplicate windows (read twice: a file named twice or copied); each counted once"],
    )


def test_watch_keeps_one_entry_per_writer_not_per_window(tmp_path: Path) -> None:
    """`watch` tells a repeated window by its writer's latest index: memory per writer."""
    run = record_run(tmp_path, data_ms=[10] * 40, reset_every=2)
    watcher = Watcher([str(run.snapshot_file)], lambda _message: None, lambda: 0.0)
    assert watcher.poll() == 20
    assert len(watcher._once._latest) == 1 and not watcher._once._seen
