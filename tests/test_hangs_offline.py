"""The hang lines of every rank's file read back: which rank the others wait for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from looptrace._cli import main
from looptrace._offline.hangs import HangBook, read_hangs, verdict
from looptrace._offline.watch import Watcher, view


def hang(
    rank: int, inner: str, *, step: int = 7, role: str | None = None, inner_s: float = 30.0,
    world: int = 4, time: float = 100.0,
) -> dict[str, Any]:  # fmt: skip
    """Return the first hang line of `rank`, stuck with `inner` as its innermost section."""
    inner_entry: dict[str, Any] = {
        "thread_id": 1, "thread": "MainThread", "path": inner, "step": step,
        "seconds": inner_s, "depth": 1,
    }  # fmt: skip
    if role is not None:
        inner_entry["role"] = role
    return {
        "kind": "looptrace.hang", "version": 1, "time": time, "rank": rank,
        "world_size": world, "host": "h", "pid": 1, "timer": "root.train",
        "thread": "MainThread", "step": step, "seconds": 40.0, "threshold_s": 10.0,
        "open": [
            {"thread_id": 1, "thread": "MainThread", "path": "root.train", "step": step,
             "seconds": 40.0, "depth": 0},
            inner_entry,
        ],
        "stacks": "",
    }  # fmt: skip


def book_of(*records: dict[str, Any]) -> HangBook:
    """Return the book of `records`, fed in order."""
    book = HangBook()
    for record in records:
        book.add(record)
    return book


def test_the_rank_outside_a_wait_section_is_named() -> None:
    """Ranks waiting in a wait section point at the one that is not in one."""
    book = book_of(
        hang(0, "root.train.backward", role="wait"),
        hang(1, "root.train.backward", role="wait"),
        hang(2, "root.train.data", role="data", inner_s=312),
        hang(3, "root.train.backward", role="wait"),
    )
    assert verdict(book) == (
        "hang: rank 2 stuck in root.train.data for 312 s at step 7; "
        "ranks 0, 1, 3 waiting in root.train.backward"
    )


def test_without_roles_the_rank_in_the_earliest_step_is_named() -> None:
    """With no wait section marked, the rank behind in step is the culprit."""
    book = book_of(
        hang(0, "root.train.sync", step=1204),
        hang(1, "root.train.load", step=1203),
        hang(2, "root.train.sync", step=1204),
        hang(3, "root.train.sync", step=1204),
    )
    assert verdict(book) == (
        "hang: rank 1 stuck in root.train.load for 30 s at step 1,203; "
        "ranks 0, 2, 3 waiting in root.train.sync"
    )


def test_in_one_step_without_roles_the_rank_stuck_longest_is_named() -> None:
    """All in one step, no roles: the rank whose innermost section opened first stopped first."""
    book = book_of(
        hang(0, "root.train.sync", world=2, inner_s=20),
        hang(1, "root.train.load", world=2, inner_s=25),
    )
    assert verdict(book) == (
        "hang: rank 1 stuck in root.train.load for 25 s at step 7; "
        "rank 0 waiting in root.train.sync"
    )


def test_a_rank_without_a_hang_line_is_named_silent() -> None:
    """A rank of the job that wrote no hang line while all others wait alike is the suspect."""
    book = book_of(*(hang(r, "root.train.backward", role="wait") for r in (0, 1, 3)))
    assert verdict(book) == (
        "hang: rank 2 silent (no hang line); ranks 0, 1, 3 waiting in root.train.backward"
    )


def test_a_cleared_hang_and_no_hang_give_no_verdict() -> None:
    """A hang that ended gives no verdict; neither do files with no hang line."""
    cleared = {"kind": "looptrace.hang_cleared", "rank": 0, "time": 200.0, "step": 7}
    assert verdict(book_of(hang(0, "root.train.data", world=1), cleared)) is None
    assert verdict(HangBook()) is None


def test_repeat_lines_update_the_age_and_the_exit_line_is_noted() -> None:
    """A repeat line ages the hang; an exit line (open sections at shutdown) is said."""
    repeat = {
        "kind": "looptrace.hang", "rank": 0, "world_size": 1, "time": 160.0, "step": 7,
        "timer": "root.train", "seconds": 100.0, "repeat": True, "innermost": "root.train.data",
    }  # fmt: skip
    at_exit = {**hang(0, "root.train.data", world=1, inner_s=95), "time": 170.0, "exit": True}
    del at_exit["timer"], at_exit["step"]
    book = book_of(hang(0, "root.train.data", world=1), repeat)
    assert verdict(book) == "hang: rank 0 stuck in root.train.data for 90 s at step 7"
    book.add(at_exit)
    assert verdict(book) == (
        "hang: rank 0 stuck in root.train.data for 95 s at step 7 "
        "(open sections written at exit by rank 0)"
    )


def test_names_from_the_files_are_escaped() -> None:
    """A section name with terminal control characters is printed escaped."""
    book = book_of(hang(0, "root.train.\x1b[2Jevil\n", world=1))
    assert verdict(book) == "hang: rank 0 stuck in root.train.\\x1b[2Jevil\\n for 30 s at step 7"


def write(path: Path, *records: dict[str, Any]) -> Path:
    """Write `records` as JSON lines to `path`."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_summary_of_files_with_only_hang_lines_prints_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job stuck before its first window: summary prints the verdict and succeeds."""
    files = [
        write(tmp_path / "s0.jsonl", hang(0, "root.train.backward", role="wait", world=2)),
        write(tmp_path / "s1.jsonl", hang(1, "root.train.data", role="data", world=2)),
    ]
    assert main(["summary", *map(str, files)]) == 0
    assert capsys.readouterr().out == (
        "hang: rank 1 stuck in root.train.data for 30 s at step 7; "
        "rank 0 waiting in root.train.backward\n\n"
    )
    assert verdict(read_hangs([str(f) for f in files])) is not None


def test_watch_shows_the_verdict_in_its_header(tmp_path: Path) -> None:
    """The live view's header names the stuck rank from the hang lines it follows."""
    write(tmp_path / "s0.jsonl", hang(0, "root.train.backward", role="wait", world=2))
    write(tmp_path / "s1.jsonl", hang(1, "root.train.data", role="data", world=2))
    warnings: list[str] = []
    watcher = Watcher([str(tmp_path)], warnings.append, lambda: 0.0)
    watcher.poll()
    console = Console(width=200, record=True)
    console.print(view(watcher.state, 0.0))
    text = console.export_text()
    assert warnings == []
    assert (
        "hang: rank 1 stuck in root.train.data for 30 s at step 7; rank 0 waiting in "
        "root.train.backward" in text
    )


def test_report_puts_the_verdict_first_among_the_findings(tmp_path: Path) -> None:
    """The HTML report lists the hang verdict, escaped, as a critical finding."""
    from looptrace._offline.report_data import load_report
    from looptrace._offline.report_html import render

    window = {
        "kind": "looptrace.snapshot", "version": 1, "step": 7, "time": 50.0, "start_ns": 0,
        "end_ns": 10**9, "rank": 0, "world_size": 2, "host": "h",
        "stats": {"root.train": {"count": 7, "total": 0.7, "mean": 0.1, "min": 0.1,
                                 "max": 0.1}},
    }  # fmt: skip
    files = [
        write(tmp_path / "s0.jsonl", window, hang(0, "root.train.backward", role="wait", world=2)),
        write(tmp_path / "s1.jsonl", {**window, "rank": 1}, hang(1, "root.train.<data>", world=2)),
    ]
    data = load_report([str(f) for f in files], lambda _message: None)
    page = render(data, "test")
    assert data.hang == (
        "hang: rank 1 stuck in root.train.<data> for 30 s at step 7; "
        "rank 0 waiting in root.train.backward"
    )
    assert (
        '<li class="critical"><span class="sev">critical</span> hang: rank 1 stuck in '
        "root.train.&lt;data&gt; for 30 s" in page
    )
