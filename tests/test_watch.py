"""`looptrace watch`: follows snapshot files as ranks append, in a recording `rich` console."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from looptrace._offline.watch import Follower, Watcher, view, watch

from .runs import record_run


class Clock:
    """A settable monotonic clock for the stale-rank rule."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        """Return the time set."""
        return self.now


def _lines(tmp_path: Path) -> dict[int, list[str]]:
    """Return the snapshot lines of two recorded ranks (3 windows each; rank 1 loads slower)."""
    source = tmp_path / "source"
    source.mkdir()
    runs = [
        record_run(source, rank=r, world_size=2, data_ms=[10 * (r + 1)] * 6, forward_ms=30)
        for r in range(2)
    ]
    return {
        r: run.snapshot_file.read_text().splitlines(keepends=True) for r, run in enumerate(runs)
    }


def _text(renderable: object) -> list[str]:
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]


def _append(path: Path, text: str) -> None:
    with path.open("a") as handle:
        handle.write(text)


def test_windows_appended_by_two_ranks_show_per_section_figures(tmp_path: Path) -> None:
    """Each poll takes the new lines; the view has the header and the slowest rank's excess."""
    lines = _lines(tmp_path)
    files = {r: tmp_path / f"snapshots.rank{r}.jsonl" for r in (0, 1)}
    clock = Clock()
    watcher = Watcher([str(tmp_path / "snapshots.rank*.jsonl")], print, clock)
    assert watcher.poll() == 0
    assert _text(view(watcher.state, clock()))[-1] == "waiting for snapshot lines ..."
    _append(files[0], lines[0][0])
    _append(files[1], lines[1][0] + lines[1][1])
    assert watcher.poll() == 3
    assert _text(view(watcher.state, clock())) == [
        "step 4 | 3 windows | 2 ranks | 22.5 steps/s per rank",
        "section          p50    p99   share  slowest rank  excess",
        "root.training  45 ms  50 ms  100.0%             1   +5 ms",
        "  forward      30 ms  30 ms   66.7%             -       -",
        "  data         15 ms  20 ms   33.3%             1   +5 ms",
    ]


def test_a_partial_line_waits_and_a_rotated_file_is_reopened(tmp_path: Path) -> None:
    """Half a line is read once whole; a file replaced by a new one is read from its start."""
    lines = _lines(tmp_path)[0]
    path = tmp_path / "snapshots.jsonl"
    follower = Follower(path)
    assert follower.new_lines() == []  # not there yet
    _append(path, lines[0] + lines[1][:50])
    assert [line.decode() for line in follower.new_lines()] == [lines[0].rstrip("\n")]
    _append(path, lines[1][50:])
    assert [line.decode() for line in follower.new_lines()] == [lines[1].rstrip("\n")]
    rotated = tmp_path / "new.jsonl"
    rotated.write_text(lines[2])
    rotated.replace(path)
    assert [line.decode() for line in follower.new_lines()] == [lines[2].rstrip("\n")]
    path.write_text("")  # truncated in place
    _append(path, lines[0])
    assert [line.decode() for line in follower.new_lines()] == [lines[0].rstrip("\n")]


def test_a_rank_that_stops_writing_is_marked_stale(tmp_path: Path) -> None:
    """Silent for more than three of its windows' durations: stale."""
    lines = _lines(tmp_path)
    files = {r: tmp_path / f"snapshots.rank{r}.jsonl" for r in (0, 1)}
    clock = Clock()
    watcher = Watcher([str(files[0]), str(files[1])], print, clock)
    _append(files[0], lines[0][0])
    _append(files[1], lines[1][0])
    watcher.poll()
    clock.now += 0.2
    assert "stale" not in _text(view(watcher.state, clock()))[0]
    _append(files[0], lines[0][1])
    watcher.poll()
    clock.now += 0.15  # rank 1 silent for 0.35 s > 3 x 100 ms; rank 0 for 0.15 s < 3 x 80 ms
    assert _text(view(watcher.state, clock()))[0] == (
        "step 4 | 3 windows | 2 ranks | stale: rank 1 | 22.5 steps/s per rank"
    )


def test_watch_redraws_the_live_view_at_each_new_window_and_stops_on_ctrl_c(
    tmp_path: Path,
) -> None:
    """The live display follows appends; Ctrl-C (in the wait) ends it with exit code 0."""
    lines = _lines(tmp_path)
    path = tmp_path / "snapshots.jsonl"
    path.write_text("")
    pending = list(lines[0])
    clock = Clock()

    def sleep(_seconds: float) -> None:
        if not pending:
            raise KeyboardInterrupt
        _append(path, pending.pop(0))

    console = Console(record=True, width=100, file=io.StringIO())
    assert watch([str(path)], print, console=console, sleep=sleep, clock=clock) == 0
    text = console.export_text()
    assert "step 6 | 3 windows | 1 rank" in text
    assert "  data         10 ms  10 ms   25.0%" in text


def test_malformed_lines_get_a_warning_and_are_skipped(tmp_path: Path) -> None:
    """A corrupt line and a snapshot line with a bad count: one warning each, no crash."""
    lines = _lines(tmp_path)[0]
    path = tmp_path / "snapshots.jsonl"
    path.write_text("{not json\n" + lines[0].replace('"count":2', '"count":-2', 1) + lines[1])
    warnings: list[str] = []
    watcher = Watcher([str(path)], warnings.append, Clock())
    assert watcher.poll() == 1
    assert warnings == [
        f"{path}: an unreadable line; skipped",
        f"{path}: a malformed snapshot line (count is not a whole number from 0 to 2**63); skipped",
    ]
