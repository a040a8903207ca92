"""`looptrace watch`: follows snapshot files as ranks append, in a recording `rich` console."""

from __future__ import annotations

import io
import os
import pty
import re
import termios
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from looptrace import RankInfo, configure
from looptrace._offline.watch import Follower, Watcher, view, watch
from looptrace.testing import FakeClock

from .helpers.console import text_lines
from .helpers.runs import record_run

HANG_S = 30  # a hang guard, not a speed claim


class Clock:
    """A settable monotonic clock for the stale-rank rule."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        """Return the time set."""
        return self.now


FINDING = [
    "current findings:",
    "  critical input_bound: 40% of the root.training lap waits for input in root.training.data "
    "(0.040 s",
    "of 0.100 s) (2 of 2 windows); try: more DataLoader workers, pin_memory, prefetching, "
    "or lighter",
    "transforms",
]


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
    assert text_lines(view(watcher.state, clock()))[-1] == "waiting for snapshot lines ..."
    _append(files[0], lines[0][0])
    _append(files[1], lines[1][0] + lines[1][1])
    assert watcher.poll() == 3
    assert text_lines(view(watcher.state, clock())) == [
        "step 4 | 3 windows | 2 ranks | 22.5 steps/s per rank",
        "section          p50    p99   share  slowest rank  excess",
        "root.training  45 ms  50 ms  100.0%             1   +5 ms",
        "  forward      30 ms  30 ms   66.7%             -       -",
        "  data         15 ms  20 ms   33.3%             1   +5 ms",
        *FINDING,
    ]


def test_a_partial_line_waits_and_a_rotated_file_is_reopened(tmp_path: Path) -> None:
    """Half a line is read once whole; a file replaced by a new one is read from its start."""
    lines = _lines(tmp_path)[0]
    path = tmp_path / "snapshots.jsonl"
    follower = Follower(path)
    assert follower.new_lines() == []  # not there yet
    _append(path, lines[0] + lines[1][:50])
    assert [(n, line.decode()) for n, line in follower.new_lines()] == [(1, lines[0].rstrip())]
    _append(path, lines[1][50:])
    assert [(n, line.decode()) for n, line in follower.new_lines()] == [(2, lines[1].rstrip())]
    rotated = tmp_path / "new.jsonl"
    rotated.write_text(lines[2])
    rotated.replace(path)
    assert [(n, line.decode()) for n, line in follower.new_lines()] == [(1, lines[2].rstrip())]
    path.write_text("")  # truncated in place
    _append(path, lines[0])
    assert [(n, line.decode()) for n, line in follower.new_lines()] == [(1, lines[0].rstrip())]


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
    assert "stale" not in text_lines(view(watcher.state, clock()))[0]
    _append(files[0], lines[0][1])
    watcher.poll()
    clock.now += 0.15  # rank 1 silent for 0.35 s > 3 x 100 ms; rank 0 for 0.15 s < 3 x 80 ms
    assert text_lines(view(watcher.state, clock()))[0] == (
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
    """A corrupt line and a snapshot line with a bad count: one warning each, by line number."""
    lines = _lines(tmp_path)[0]
    path = tmp_path / "snapshots.jsonl"
    path.write_text("{not json\n" + lines[0].replace('"count":2', '"count":-2', 1) + lines[1])
    warnings: list[str] = []
    watcher = Watcher([str(path)], warnings.append, Clock())
    assert watcher.poll() == 1
    assert warnings == [
        f"{path}: skipped unreadable line 1",
        f"{path}: line 2 is a malformed snapshot record (count is not a whole number from 0 to "
        "2**63); skipped",
    ]
    _append(path, "{no\n" * 3)
    assert watcher.poll() == 0
    assert warnings[2:] == [
        f"{path}: skipped unreadable line 4",
        f"{path}: further bad lines are skipped without a warning",
    ]


def test_files_that_are_not_snapshot_files_get_one_warning(tmp_path: Path) -> None:
    """A foreign file and a span file: one line each, as the other commands give; not read."""
    foreign = tmp_path / "other.jsonl"
    foreign.write_text('{"hello": 1}\n')
    (tmp_path / "run").mkdir()
    spans = record_run(tmp_path / "run").span_file
    snapshots = spans.with_name("snapshots.jsonl")
    warnings: list[str] = []
    watcher = Watcher([str(foreign), str(spans), str(snapshots)], warnings.append, Clock())
    assert watcher.poll() == 2
    _append(foreign, '{"kind": "looptrace.snapshot"}\n')
    assert watcher.poll() == 0
    assert warnings == [
        f"{foreign}: not a looptrace span, snapshot or metrics file (line 1 has keys: hello); "
        "skipped",
        f"{spans}: a span file; watch follows snapshot files; skipped",
    ]


def test_q_typed_at_the_terminal_quits_and_the_terminal_is_restored(tmp_path: Path) -> None:
    """Keys come from a real terminal (a pty) in cbreak mode; `q` ends the view, echo returns."""
    master, slave = pty.openpty()
    terminal = os.fdopen(slave, "r")
    before = termios.tcgetattr(slave)
    path = tmp_path / "snapshots.jsonl"
    path.write_text("".join(_lines(tmp_path)[0]))
    console = Console(record=True, width=100, file=io.StringIO())
    seen: list[list[Any]] = []

    def press_q() -> None:
        deadline = time.monotonic() + HANG_S
        while termios.tcgetattr(slave)[3] & termios.ICANON and time.monotonic() < deadline:
            time.sleep(0.01)  # until the view has put the terminal in cbreak mode
        seen.append(termios.tcgetattr(slave))
        os.write(master, b"xq")

    try:
        presser = threading.Thread(target=press_q)
        presser.start()
        code = watch([str(path)], print, console=console, interval=HANG_S, keys=terminal)
        presser.join(HANG_S)
        assert code == 0
        assert not seen[0][3] & (termios.ICANON | termios.ECHO)  # cbreak while it ran
        assert termios.tcgetattr(slave) == before
    finally:
        terminal.close()
        os.close(master)
    text = console.export_text()
    assert "step 6 | 3 windows | 1 rank" in text
    assert "q or Ctrl-C quits" in text


def test_input_that_is_not_a_terminal_is_never_read(tmp_path: Path) -> None:
    """Piped stdin: no key is read (a `q` in it does not quit); Ctrl-C is the way out."""
    path = tmp_path / "snapshots.jsonl"
    path.write_text("".join(_lines(tmp_path)[0]))
    read, write = os.pipe()
    os.write(write, b"q")
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:
            raise KeyboardInterrupt

    console = Console(record=True, width=100, file=io.StringIO())
    with os.fdopen(read, "r") as piped:
        assert watch([str(path)], print, console=console, sleep=sleep, keys=piped) == 0
        assert os.read(read, 1) == b"q"  # still there: never read
    os.close(write)
    assert waits == [1.0, 1.0, 1.0]
    assert "Ctrl-C quits" in console.export_text()


def test_a_running_two_rank_gloo_job_is_followed_window_by_window(tmp_path: Path) -> None:
    """Ranks of a real gloo job append windows; each shows up, with the straggler; `q` quits."""
    pytest.importorskip("torch.distributed", reason="needs torch (the test extra)")
    from .helpers import gloo_files

    out, go = tmp_path / "out", tmp_path / "go"
    out.mkdir()
    go.mkdir()
    procs = gloo_files.start(out, tmp_path / "store", go)
    master, slave = pty.openpty()
    terminal = os.fdopen(slave, "r")
    console = Console(record=True, width=200, file=io.StringIO(), force_terminal=True)
    codes: list[int] = []
    viewer = threading.Thread(
        target=lambda: codes.append(
            watch([str(out / "snapshots.rank*.jsonl")], print, console=console, interval=0.05,
                  keys=terminal)
        )
    )  # fmt: skip
    viewer.start()
    try:
        for window in range(3):
            (go / str(window)).touch()  # the ranks run the window's steps and reset
            want = f"step {10 * window + 10} | {2 * window + 2} windows | 2 ranks"
            deadline = time.monotonic() + gloo_files.JOB_TIMEOUT_S
            while want not in console.export_text(clear=False):
                assert time.monotonic() < deadline, f"no {want!r} in the view (a hang)"
                time.sleep(0.05)
        gloo_files.finish(procs)
    finally:
        os.write(master, b"q")
        viewer.join(HANG_S)
        terminal.close()
        os.close(master)
        gloo_files.kill(procs)
    assert codes == [0]
    text = console.export_text()
    last = text[text.rindex("step 30 | 6 windows | 2 ranks") :].splitlines()
    stale = r" \| stale: rank [0-9]+(, [0-9]+)*"  # wall time since the job ended: not pinned
    last[0] = re.sub(stale, "", last[0])
    assert [line.rstrip() for line in last[:6]] == [
        "step 30 | 6 windows | 2 ranks | 8.33 steps/s per rank",
        "section           p50     p99   share  slowest rank  excess",
        "root.training  120 ms  120 ms  100.0%             -       -",
        "  forward       70 ms   80 ms   58.3%             1  +10 ms",
        "  backward      40 ms   50 ms   33.3%             0  +10 ms",
        "  data          10 ms   10 ms    8.3%             -       -",
    ]
    assert last[6:8] == [
        "current findings:",
        "  critical straggler: rank 1 makes the others wait (least time in wait sections): 0.200 s "
        "(29%) over the typical rank; cause root.training.forward (2 of 2 windows); try: look at "
        "root.training.forward ",
    ]
    middle = text[text.index("step 20 | 4 windows | 2 ranks") : text.index("step 30 | 6 windows")]
    # the middle window's stalled step, in one window only, is a burst: no slow_steps warning
    assert "current findings:\n  critical straggler: rank 1 makes the others wait" in middle
    assert "slow_steps" not in middle


def _counting_run(directory: Path, *, rank: int, world_size: int) -> None:
    """Write 4 steps (64 samples each, a reset every 2) that end with a partial window.

    Each step laps first, so every reset falls inside a lap: the window after the last one
    holds the tail of a lap only (partial). A step of rank 0 takes 100 ms, of rank 1 150 ms.
    """
    clock = FakeClock(start_s=0.0)
    lt = configure(
        clock=clock,
        rank=RankInfo(rank=rank, world_size=world_size),
        traces_exporter="none",
        metrics_exporter="none",
        snapshot_file=directory / "snapshots.jsonl",
    )
    train = lt.timer("training")
    for step in range(4):
        train.record()  # the previous lap ends, the next begins
        train.record("data")
        clock.advance(0.05 * (rank + 1))
        train.count("samples", 64)
        train.record("forward")
        clock.advance(0.05)
        if step % 2 == 1:
            lt.reset()
    clock.advance(0.01)
    train.stop()
    lt.shutdown()


def test_the_header_shows_the_units_per_second_and_one_rank_no_rank_columns(
    tmp_path: Path,
) -> None:
    """Samples per second in the header; with one rank no slowest-rank or excess column."""
    _counting_run(tmp_path, rank=0, world_size=1)
    watcher = Watcher([str(tmp_path / "snapshots.jsonl")], print, Clock())
    assert watcher.poll() == 3
    lines = text_lines(view(watcher.state, Clock()()))
    assert lines[:2] == [
        "step 4 | 2 windows | 1 rank | 10 steps/s per rank | 640 samples/s",
        "section           p50     p99   share",
    ]


def test_two_ranks_show_the_jobs_units_per_second_and_the_rank_columns(tmp_path: Path) -> None:
    """The job's samples per second is the sum of the ranks'; the rank columns are back."""
    for rank in (0, 1):
        _counting_run(tmp_path, rank=rank, world_size=2)
    watcher = Watcher([str(tmp_path)], print, Clock())
    assert watcher.poll() == 6
    lines = text_lines(view(watcher.state, Clock()()))
    # 128 samples in 0.2 s on rank 0 and in 0.3 s on rank 1: 640 + 426.7 a second
    assert lines[0] == (
        "step 4 | 4 windows | 2 ranks | 8.33 steps/s per rank | 1,067 samples/s for the job"
    )
    assert lines[1].split() == ["section", "p50", "p99", "share", "slowest", "rank", "excess"]


def test_a_partial_last_window_neither_replaces_the_latest_nor_counts(tmp_path: Path) -> None:
    """The tail of a lap at the end of a run (10 ms): the view keeps the last whole window."""
    _counting_run(tmp_path, rank=0, world_size=1)
    watcher = Watcher([str(tmp_path / "snapshots.jsonl")], print, Clock())
    watcher.poll()
    assert [round(s.seconds, 6) for s in watcher.state.ranks.values()] == [0.2]  # not 0.01
    assert watcher.state.windows == 2


def test_a_folder_holding_span_files_is_followed_without_a_warning(tmp_path: Path) -> None:
    """Span files reached through the run's folder are passed over in silence."""
    record_run(tmp_path)
    warnings: list[str] = []
    watcher = Watcher([str(tmp_path)], warnings.append, Clock())
    assert watcher.poll() == 2
    assert warnings == []
