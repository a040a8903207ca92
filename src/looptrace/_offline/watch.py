"""`looptrace watch`: a live terminal view that follows snapshot files as ranks append to them.

Each file is read from where it was left: only whole new lines, a truncated or rotated file
is reopened from its start. The view (a `rich` live display) shows per section the p50 and
p99 of the latest window of each rank, its share of the lap, the slowest rank and its excess
over the median rank; a header line counts steps, windows and ranks, and a rank whose file has
been silent for three of its windows' durations is marked stale. Needs the `files` extra.
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
from typing import BinaryIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from looptrace._offline.reader import SNAPSHOTS, Warn, Window, kind_of, snapshot_window
from looptrace._offline.report_data import expand_inputs, main_timer
from looptrace._offline.table import format_seconds, tree_paths
from looptrace._stats.snapshot import SectionStats

_HEAD = 256
STALE_WINDOWS = 3  # a rank is stale after this many of its windows' durations of silence


class Follower:
    """Reads the whole lines appended to one file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._inode: int | None = None
        self._partial = b""
        self._head = b""  # the file's first bytes, to tell a rewritten file from a grown one

    def new_lines(self) -> list[bytes]:
        """Return the complete lines written since the last call (none if the file is gone)."""
        try:
            with self.path.open("rb") as handle:
                chunk = self._read(handle)
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        return [line for line in lines if line.strip()]

    def _read(self, handle: BinaryIO) -> bytes:
        status = os.fstat(handle.fileno())
        if (
            status.st_ino != self._inode
            or status.st_size < self._offset
            or handle.read(len(self._head)) != self._head
        ):  # rotated, truncated, or truncated and rewritten since the last look
            self._inode, self._offset, self._partial, self._head = status.st_ino, 0, b"", b""
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

    def add(self, window: Window, seconds: float, now: float) -> None:
        """Take one new window of a rank."""
        self.windows += 1
        if window.step is not None:
            self.step = max(window.step, self.step or 0)
        self.ranks[window.rank] = RankState(window, seconds, now)

    def stale(self, now: float) -> list[int]:
        """Return the ranks silent for more than `STALE_WINDOWS` of their windows' durations."""
        return sorted(
            rank
            for rank, state in self.ranks.items()
            if not math.isnan(state.seconds) and now - state.seen > STALE_WINDOWS * state.seconds
        )


class Watcher:
    """Follows the snapshot files named (files, directories, globs, re-expanded each poll)."""

    def __init__(self, names: Sequence[str], warn: Warn, clock: Callable[[], float]) -> None:
        self._names = list(names)
        self._warn = warn
        self._clock = clock
        self._followers: dict[str, Follower] = {}
        self.state = WatchState()

    def poll(self) -> int:
        """Read what the files gained; return the number of new windows."""
        for name in expand_inputs(self._names, lambda _message: None):
            self._followers.setdefault(name, Follower(Path(name)))
        added = 0
        now = self._clock()
        for name, follower in self._followers.items():
            for line in follower.new_lines():
                window, seconds = self._parse(name, line)
                if window is not None:
                    self.state.add(window, seconds, now)
                    added += 1
        return added

    def _parse(self, name: str, line: bytes) -> tuple[Window | None, float]:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            self._warn(f"{name}: an unreadable line; skipped")
            return None, math.nan
        if kind_of(record) != SNAPSHOTS:
            return None, math.nan
        try:
            window = snapshot_window(record)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:
            self._warn(f"{name}: a malformed snapshot line ({error}); skipped")
            return None, math.nan
        if window.subtree != "root":
            return None, math.nan
        start, end = record.get("start_ns"), record.get("end_ns")
        known = isinstance(start, int) and isinstance(end, int) and end > start
        return window, (end - start) / 1e9 if known else math.nan


def view(state: WatchState, now: float) -> Group:
    """Return the header line and the table of sections of the latest windows."""
    latest = {rank: s.window for rank, s in state.ranks.items()}
    stale = state.stale(now)
    header = Text(
        f"step {state.step if state.step is not None else '-'} | {state.windows} windows | "
        f"{len(latest)} rank{'' if len(latest) == 1 else 's'}"
    )
    if stale:
        header.append(f" | stale: rank {', '.join(map(str, stale))}", style="bold red")
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("section", "p50", "p99", "share", "slowest rank", "excess"):
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
    for path, parent, depth in tree_paths(merged):
        row = _row(path, timer, latest)
        name = "  " * depth + (path[len(parent) + 1 :] if parent else path)
        table.add_row(name, *row)
    return Group(header, table)


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
) -> int:
    """Follow the files and redraw at each new window until Ctrl-C (or `updates` redraws)."""
    watcher = Watcher(names, warn, clock)
    drawn = 0
    watcher.poll()
    with Live(view(watcher.state, clock()), console=console, auto_refresh=False) as live:
        try:
            while updates is None or drawn < updates:
                sleep(interval)
                if watcher.poll() or watcher.state.stale(clock()):
                    live.update(view(watcher.state, clock()), refresh=True)
                    drawn += 1
        except KeyboardInterrupt:
            pass
    return 0
