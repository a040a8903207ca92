"""`looptrace watch`: a live terminal view that follows snapshot files as ranks append to them.

Each file is read from where it was left: only whole new lines, a truncated or rotated file
is reopened from its start. The view (a `rich` live display) shows per section the p50 and
p99 of the latest window of each rank, its share of the lap, and with several ranks the slowest
rank and its excess over the median rank; a header line counts steps, windows and ranks, the
steps per second and the units per second the main timer counted, and a rank whose file has
been silent for three of its windows' durations is marked stale; a line under it shows the
system figures of the latest windows (CPU, memory, GPUs) where they were sampled. A partial
window (the tail of one lap, at the end of a run) replaces no rank's latest window and is not
counted. Files that are not snapshot files are warned about when named, and passed over in
silence when a directory or a glob reaches them (a run's folder holds its span files too).
Needs the `files` extra.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from looptrace._base.units import format_seconds
from looptrace._export.records import HANG_KINDS, LOSS_KIND
from looptrace._offline.duplicates import Once
from looptrace._offline.findings import recorded_findings
from looptrace._offline.hangs import HangBook, verdict
from looptrace._offline.inputs import expand_inputs
from looptrace._offline.keys import Keys
from looptrace._offline.palette import LEGEND, OTHER, colour_of, colours
from looptrace._offline.reader import SNAPSHOTS, Warn, kind_of, line_kind
from looptrace._offline.report_data import children_of, main_timer
from looptrace._offline.system_view import system_line
from looptrace._offline.table import tree_paths
from looptrace._offline.text import escaped, one_line
from looptrace._offline.throughput import format_count, job_rates
from looptrace._offline.window_records import Window, snapshot_window
from looptrace._stats.partial import partial_window
from looptrace._stats.snapshot import SectionStats

_HEAD = 256
FINDINGS = 5  # findings shown below the table
WARNINGS_PER_FILE = 3  # bad lines of one file named; the rest are skipped silently
STALE_WINDOWS = 3  # a rank is stale after this many of its windows' durations of silence


class Follower:
    """Reads the whole lines appended to one file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._inode: int | None = None
        self._partial = b""
        self._head = b""  # the file's first bytes, to tell a rewritten file from a grown one
        self._number = 0  # lines read since the file was (re)opened

    def new_lines(self) -> list[tuple[int, bytes]]:
        """Return `(line number, line)` of the complete non-blank lines written since the last call.

        None if the file is gone; a file rotated or truncated is read again from line 1.
        """
        try:
            with self.path.open("rb") as handle:
                chunk = self._read(handle)
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        first, self._number = self._number + 1, self._number + len(lines)
        return [(first + i, line) for i, line in enumerate(lines) if line.strip()]

    def _read(self, handle: BinaryIO) -> bytes:
        status = os.fstat(handle.fileno())
        if (
            status.st_ino != self._inode
            or status.st_size < self._offset
            or handle.read(len(self._head)) != self._head
        ):  # rotated, truncated, or truncated and rewritten since the last look
            self._inode, self._offset, self._partial, self._head = status.st_ino, 0, b"", b""
            self._number = 0
        if self._offset < _HEAD:
            handle.seek(0)
            self._head = handle.read(min(_HEAD, status.st_size))
        handle.seek(self._offset)
        return handle.read(status.st_size - self._offset)


@dataclass
class RankState:
    """The latest window of one rank and when it arrived."""

    window: Window
    seconds: float  # the window's duration (end_ns - start_ns), NaN if unknown
    seen: float  # time.monotonic() when it was read


@dataclass
class WatchState:
    """What the view shows: every rank's latest window, the counts of the header."""

    ranks: dict[int, RankState] = field(default_factory=dict)
    windows: int = 0
    step: int | None = None
    hangs: HangBook = field(default_factory=HangBook)  # the ranks' `hang` lines

    def add(self, window: Window, seconds: float, now: float) -> None:
        """Take one new window of a rank; a partial one only says that the rank is alive."""
        if window.step is not None:
            self.step = max(window.step, self.step or 0)
        held = self.ranks.get(window.rank)
        if partial_window(window.stats):  # no whole lap: no share or rate to show
            if held is not None:
                held.seen = now
                return
        else:
            self.windows += 1
        self.ranks[window.rank] = RankState(window, seconds, now)

    def stale(self, now: float) -> list[int]:
        """Return the ranks silent for more than `STALE_WINDOWS` of their windows' durations."""
        return sorted(
            rank
            for rank, state in self.ranks.items()
            if not math.isnan(state.seconds) and now - state.seen > STALE_WINDOWS * state.seconds
        )


class Watcher:
    """Follows the snapshot files named (files, directories, globs, re-expanded each poll).

    Bad input gets the one-line warnings of the other commands: a file that is not
    looptrace's, or holds spans or metrics rather than snapshots, once, and then is not read;
    an unreadable or malformed line by its number, `WARNINGS_PER_FILE` per file at most.
    """

    def __init__(self, names: Sequence[str], warn: Warn, clock: Callable[[], float]) -> None:
        self._names = list(names)
        self._warn = warn
        self._clock = clock
        self._followers: dict[str, Follower] = {}
        self._named: set[str] = set()  # the files named as such, not reached by a directory or glob
        self._ignored: set[str] = set()  # files that are not snapshot files
        self._warned: dict[str, int] = {}
        self._once = Once("window", in_order=True)
        self.state = WatchState()

    def poll(self) -> int:
        """Read what the files gained; return the number of new windows."""
        for name in expand_inputs(self._names, lambda _message: None):
            self._followers.setdefault(name, Follower(Path(name)))
        self._named = {name for name in self._names if name in self._followers}
        added = 0
        now = self._clock()
        for name, follower in self._followers.items():
            if name in self._ignored:
                continue
            for number, line in follower.new_lines():
                window, seconds = self._parse(name, number, line)
                if window is not None and self._once.first(
                    window.key, window.rank, window.writer, window.host
                ):
                    self.state.add(window, seconds, now)
                    added += 1
                if name in self._ignored:
                    break
        for warning in self._once.news():
            self._warn(warning)
        return added

    def _parse(self, name: str, number: int, line: bytes) -> tuple[Window | None, float]:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            self._bad(name, f"skipped unreadable line {number}")
            return None, math.nan
        if line_kind(record) in HANG_KINDS | {LOSS_KIND}:
            if line_kind(record) != LOSS_KIND:  # (a loss line: windows it could not write)
                self.state.hangs.add(record)
            return None, math.nan
        kind = kind_of(record)
        if kind != SNAPSHOTS:
            self._ignored.add(name)
            if kind is None:
                keys = ", ".join(list(record)[:4]) if isinstance(record, dict) else "none"
                self._warn(
                    f"{name}: not a looptrace span, snapshot or metrics file (line {number} "
                    f"has keys: {one_line(keys)}); skipped"
                )
            elif name in self._named:  # (reached through a run's folder, it is expected there)
                self._warn(f"{name}: a {kind} file; watch follows snapshot files; skipped")
            return None, math.nan
        try:
            window = snapshot_window(record)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:
            self._bad(name, f"line {number} is a malformed snapshot record ({error}); skipped")
            return None, math.nan
        if window.subtree != "root":
            return None, math.nan
        start, end = record.get("start_ns"), record.get("end_ns")
        known = isinstance(start, int) and isinstance(end, int) and end > start
        return window, (end - start) / 1e9 if known else math.nan

    def _bad(self, name: str, problem: str) -> None:
        """Warn about a bad line of `name` (`problem` in one line), a few per file."""
        count = self._warned[name] = self._warned.get(name, 0) + 1
        if count <= WARNINGS_PER_FILE:
            self._warn(f"{name}: {one_line(problem)}")
        if count == WARNINGS_PER_FILE:
            self._warn(f"{name}: further bad lines are skipped without a warning")


def view(state: WatchState, now: float) -> Group:
    """Return the header line and the table of sections of the latest windows."""
    latest = {rank: s.window for rank, s in state.ranks.items()}
    stale = state.stale(now)
    header = Text(
        f"step {state.step if state.step is not None else '-'} | {state.windows} "
        f"window{'' if state.windows == 1 else 's'} | "
        f"{len(latest)} rank{'' if len(latest) == 1 else 's'}"
    )
    if stale:
        header.append(f" | stale: rank {', '.join(map(str, stale))}", style="bold red")
    hang = verdict(state.hangs)
    if hang is not None:
        header.append(f"\n{hang}", style="bold red")
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["section", "p50", "p99", "share"]
    if len(latest) > 1:  # with one rank there is no slowest rank
        columns += ["slowest rank", "excess"]
    for column in columns:
        table.add_column(column, justify="left" if column == "section" else "right")
    if not latest:
        return Group(header, Text("waiting for snapshot lines ..."))
    merged: dict[str, SectionStats] = {}
    for window in latest.values():
        for path, stats in window.stats.items():
            if stats.count:
                merged.setdefault(path, stats)
    timer = main_timer(merged)
    throughput = _throughput(state, timer)
    if throughput:
        header.append(f" | {throughput}")
    job = " for the job" if len(latest) > 1 else ""  # the sum of the ranks' rates
    for unit, per_s in job_rates(list(latest.values()), timer).items():
        if not math.isnan(per_s):
            header.append(f" | {format_count(per_s)} {escaped(unit)}/s{job}")
    coloured = colours(children_of(merged, timer)[:LEGEND])  # as in the plot and the report
    del coloured[OTHER]
    for path, parent, depth in tree_paths(merged):
        row = _row(path, timer, latest)[: len(columns) - 1]
        name = "  " * depth + (path[len(parent) + 1 :] if parent else path)
        table.add_row(Text(escaped(name), style=colour_of(path, coloured) or ""), *row)
    system = system_line(list(latest.values()))  # the sampled CPU, memory and GPUs
    lines = [header, *([] if system is None else [Text(system)])]
    return Group(*lines, table, _findings(list(latest.values())))


def _findings(latest: list[Window]) -> Text:
    """Return the warnings and worse of the latest window of every rank, worst first."""
    found = recorded_findings(latest)
    if not found:
        return Text("no finding of warning or worse in the latest windows", style="dim")
    text = Text("current findings:")
    for item in found[:FINDINGS]:
        text.append("\n  ")
        text.append(
            f"{item.severity:<8}", style="bold red" if item.severity == "critical" else "yellow"
        )
        text.append(" " + escaped(item.text()))
    if len(found) > FINDINGS:
        text.append(f"\n  ... and {len(found) - FINDINGS} more")
    return text


def _row(path: str, timer: str, latest: dict[int, Window]) -> list[str]:
    p50s: list[float] = []
    p99s: list[float] = []
    means: dict[int, float] = {}  # time per lap of the timer
    totals = laps = 0.0
    for rank, window in latest.items():
        stats, lap = window.stats.get(path), window.stats.get(timer)
        if stats is None or not stats.count:
            continue
        p50s.append(stats.p50)
        p99s.append(stats.p99)
        means[rank] = stats.total / lap.count if lap is not None and lap.count else stats.mean
        if lap is not None and not math.isnan(stats.total):
            totals += stats.total
            laps += lap.total
    known = [v for v in p50s if not math.isnan(v)]
    p50 = statistics.median(known) if known else math.nan
    p99 = max((v for v in p99s if not math.isnan(v)), default=math.nan)
    share = f"{100 * totals / laps:.1f}%" if laps > 0 else "-"
    slowest, excess = "-", "-"
    if len(means) > 1:
        worst = max(means, key=lambda r: (means[r], -r))
        over = means[worst] - statistics.median(means.values())
        if over > 0:
            slowest, excess = str(worst), "+" + format_seconds(over)
    return [format_seconds(p50), format_seconds(p99), share, slowest, excess]


def _throughput(state: WatchState, timer: str) -> str:
    rates = []
    for rank_state in state.ranks.values():
        lap = rank_state.window.stats.get(timer)
        if lap is not None and rank_state.seconds > 0:
            rates.append(lap.count / rank_state.seconds)
    return f"{statistics.mean(rates):.3g} steps/s per rank" if rates else ""


def watch(
    names: Sequence[str],
    warn: Warn,
    *,
    console: Console | None = None,
    interval: float = 1.0,
    updates: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    keys: TextIO | None = None,
) -> int:
    """Follow the files and redraw at each new window until `q` or Ctrl-C (or `updates` redraws).

    `q` is read from `keys` (the CLI gives stdin) when it is a terminal; else only Ctrl-C quits.
    """
    watcher = Watcher(names, warn, clock)
    drawn = 0
    watcher.poll()
    with Keys(keys, sleep) as typed:
        footer = Text("q or Ctrl-C quits" if typed.active else "Ctrl-C quits", style="dim")

        def frame() -> Group:
            return Group(view(watcher.state, clock()), footer)

        with Live(frame(), console=console, auto_refresh=False) as live:
            try:
                while updates is None or drawn < updates:
                    if "q" in typed.wait(interval).lower():
                        break
                    if (
                        watcher.poll()
                        or watcher.state.stale(clock())
                        or watcher.state.hangs.standing()
                    ):
                        live.update(frame(), refresh=True)
                        drawn += 1
            except KeyboardInterrupt:
                pass
    return 0
