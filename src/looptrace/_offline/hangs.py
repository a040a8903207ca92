"""The `hang` lines of every rank's snapshot file, and which rank the others wait for.

No collective can run while ranks are stuck, so the verdict comes from the files alone. Each
rank's watchdog wrote its open sections when its step passed the threshold; a rank stuck
outside a wait section while others wait inside one is the culprit. Where the roles do not
tell (no wait section marked, or every rank outside one), the rank in the earliest step is,
and among ranks in one step the one whose innermost section has been open longest (it got
stuck first; the others followed it into the collective). A rank of the job that wrote no
`hang` line while the others did is named as silent: it may be frozen where its watchdog
cannot run (a C call that holds the GIL; see the docs' Reliability page), or dead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looptrace._export.records import HANG_CLEARED_KIND, HANG_KIND
from looptrace._offline.text import escaped


@dataclass
class RankHang:
    """The standing hang of one rank: its hung step and its innermost open section."""

    rank: int
    timer: str
    step: int
    seconds: float  # the step's age at the latest line
    innermost: str
    innermost_seconds: float
    innermost_wait: bool
    time: float  # epoch seconds of the latest line
    cleared: bool = False
    at_exit: bool = False  # the process wrote its open sections at shutdown


@dataclass
class HangBook:
    """What the `hang` lines of all files say, rank by rank; lines are fed in any order."""

    ranks: dict[int, RankHang] = field(default_factory=dict)
    world_size: int = 0
    seen: set[int] = field(default_factory=set)  # ranks with any line at all

    def add(self, record: dict[str, Any]) -> None:
        """Take one parsed line (any kind; lines that are not hang lines only count the rank)."""
        rank = record.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool):
            return
        self.seen.add(rank)
        size = record.get("world_size")
        if isinstance(size, int) and not isinstance(size, bool):
            self.world_size = max(self.world_size, size)
        kind = record.get("kind")
        time = _number(record.get("time"))
        known = self.ranks.get(rank)
        if known is not None and time < known.time:
            return  # an older line than the one kept
        if kind == HANG_CLEARED_KIND and known is not None and known.step == record.get("step"):
            known.cleared, known.time = True, time
        elif kind == HANG_KIND and isinstance(record.get("open"), list):
            hang = _from_open(rank, record, time)
            if hang is not None:
                if known is not None and hang.at_exit:
                    hang.timer, hang.step = known.timer, known.step
                    hang.cleared = known.cleared
                self.ranks[rank] = hang
        elif kind == HANG_KIND and known is not None and record.get("step") == known.step:
            known.seconds = _number(record.get("seconds"))
            known.innermost_seconds += time - known.time
            known.time = time

    def standing(self) -> list[RankHang]:
        """Return the ranks whose hung step had not ended at their latest line, by rank."""
        return [hang for _, hang in sorted(self.ranks.items()) if not hang.cleared]


def _from_open(rank: int, record: dict[str, Any], time: float) -> RankHang | None:
    sections = [s for s in record["open"] if isinstance(s, dict) and isinstance(s.get("path"), str)]
    timer = record.get("timer")
    hung = [s for s in sections if s.get("path") == timer and s.get("depth") == 0]
    thread = hung[0].get("thread_id") if hung else None
    mine = [s for s in sections if thread is None or s.get("thread_id") == thread]
    if not mine:
        return None
    inner = max(mine, key=lambda s: _number(s.get("depth")))
    step = record.get("step", inner.get("step"))
    return RankHang(
        rank=rank,
        timer=str(timer if isinstance(timer, str) else mine[0]["path"]),
        step=step if isinstance(step, int) else -1,
        seconds=_number(record.get("seconds", mine[0].get("seconds"))),
        innermost=str(inner["path"]),
        innermost_seconds=_number(inner.get("seconds")),
        innermost_wait=inner.get("role") == "wait",
        time=time,
        at_exit=record.get("exit") is True,
    )


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def culprits(book: HangBook) -> tuple[list[RankHang], list[RankHang], list[int]]:
    """Return (the stuck ranks named, the ranks waiting for them, the silent ranks)."""
    standing = book.standing()
    if not standing:
        return [], [], []
    silent = sorted(set(range(book.world_size)) - set(book.ranks))
    outside = [hang for hang in standing if not hang.innermost_wait]
    waiting = [hang for hang in standing if hang.innermost_wait]
    if outside and waiting:
        return outside, waiting, silent
    earliest = min(hang.step for hang in standing)
    behind = [hang for hang in standing if hang.step == earliest]
    if len(behind) < len(standing):
        return behind, [hang for hang in standing if hang.step != earliest], silent
    if silent:  # every rank that wrote is stuck alike: the silent ones are the suspects
        return [], standing, silent
    first = max(standing, key=lambda hang: hang.innermost_seconds)
    return [first], [hang for hang in standing if hang is not first], silent


def verdict(book: HangBook) -> str | None:
    """Return the one-paragraph verdict on the standing hang, None when no rank is hung."""
    stuck, waiting, silent = culprits(book)
    if not stuck and not waiting:
        return None
    parts = [
        f"rank {hang.rank} stuck in {escaped(hang.innermost)} for "
        f"{hang.innermost_seconds:,.0f} s at step {hang.step:,}"
        for hang in stuck
    ]
    if silent:
        parts.append(f"rank{'s' * (len(silent) > 1)} {_ranks(silent)} silent (no hang line)")
    by_section: dict[str, list[int]] = {}
    for hang in waiting:
        by_section.setdefault(hang.innermost, []).append(hang.rank)
    for path, ranks in sorted(by_section.items(), key=lambda item: item[1]):
        parts.append(f"rank{'s' * (len(ranks) > 1)} {_ranks(ranks)} waiting in {escaped(path)}")
    exits = [hang.rank for hang in [*stuck, *waiting] if hang.at_exit]
    text = "hang: " + "; ".join(parts)
    if exits:
        text += f" (open sections written at exit by rank{'s' * (len(exits) > 1)} {_ranks(exits)})"
    return text


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(ranks)))


def read_hangs(paths: Sequence[str]) -> HangBook:
    """Read the hang lines (and the ranks) of the files named; unreadable lines are skipped."""
    book = HangBook()
    for name in paths:
        try:
            with Path(name).open("rb") as handle:
                for number, raw in enumerate(handle):
                    if number and b'"looptrace.hang' not in raw:
                        continue  # the first line names the rank; then only hang lines
                    try:
                        record = json.loads(raw)
                    except (ValueError, RecursionError):
                        continue
                    if isinstance(record, dict):
                        book.add(record)
        except OSError:
            continue
    return book
