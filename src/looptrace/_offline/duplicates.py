"""Count nothing twice: windows and spans reached twice, and ranks claimed by two processes.

A window is known by its writer (the `writer` of its snapshot line, one per process), rank,
timer and `window` index; a line written before looptrace recorded those by its rank, timer,
step and start and end times. A span is known by its trace and span ids. The second sight of
one (a file named twice, a copy in another directory) is left out, and the reader warns once.
Two writers of one rank (two processes given the same `RANK`) are not duplicates: their
windows and spans are kept, and the reader names both writers in a warning.

Memory: a writer's window indices are kept as runs of consecutive indices (`IndexRuns`),
one run for a file read whole, so the windows of today's files cost one entry per writer
and timer however many there are. Spans, and windows of lines written before looptrace
recorded a writer and an index, are kept one key each.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable

from looptrace._offline.text import one_line


class Once:
    """Tells the first sight of each window or span from a second one; notes each rank's writers."""

    def __init__(self, noun: str, *, in_order: bool = False) -> None:
        """Count `noun`s; `in_order`: each writer's are read in the order it wrote them.

        In order (`watch` follows files as they grow), a window is told by its writer's
        latest index alone, so memory is one entry per writer and timer, not per window.
        """
        self._noun = noun
        self._in_order = in_order
        self._latest: dict[Hashable, int] = {}  # (writer, rank, timer) -> its latest index
        self._seen: set[Hashable] = set()
        self._runs: dict[Hashable, IndexRuns] = {}  # (writer, rank, timer) -> indices seen
        self._writers: dict[int, dict[str, str | None]] = {}  # rank -> writer -> its host
        self.duplicates = 0
        self._said: set[object] = set()  # what `news()` has said

    def first(self, key: Hashable | None, rank: int, writer: str | None, host: str | None) -> bool:
        """Return whether `key` is seen for the first time (None: it cannot be told apart)."""
        if writer is not None:
            writers = self._writers.setdefault(rank, {})
            if writer not in writers:
                writers[writer] = host
        if key is None:
            return True
        if self._in_order and isinstance(key, tuple) and len(key) == 4:
            *who, index = key  # (writer, rank, timer, window index)
            latest = self._latest.get(tuple(who), -1)
            if isinstance(index, int) and index <= latest:
                self.duplicates += 1
                return False
            self._latest[tuple(who)] = index if isinstance(index, int) else latest
            return True
        if isinstance(key, tuple) and len(key) == 4 and type(key[3]) is int:
            *who, index = key  # (writer, rank, timer, window index)
            runs = self._runs.get(tuple(who))
            if runs is None:
                runs = self._runs[tuple(who)] = IndexRuns()
            new = runs.add(index)
        else:
            new = key not in self._seen
            self._seen.add(key)
        self.duplicates += not new
        return new

    def warnings(self) -> list[str]:
        """Return one line per problem found: the duplicates, then each rank with two writers."""
        lines = []
        if self.duplicates:
            plural = "s" if self.duplicates > 1 else ""
            lines.append(
                f"{self.duplicates} duplicate {self._noun}{plural} (read twice: a file named "
                "twice or copied); counted once"
            )
        lines += [
            claimed(rank, writers)
            for rank, writers in sorted(self._writers.items())
            if len(writers) > 1
        ]
        return lines

    def news(self) -> list[str]:
        """Return the warnings not said before: the first duplicate, each newly shared rank.

        For a reader that goes on reading (`watch`): each problem is said once, when found.
        """
        lines = []
        if self.duplicates and "duplicates" not in self._said:
            self._said.add("duplicates")
            lines.append(
                f"duplicate {self._noun}s (read twice: a file named twice or copied); each "
                "counted once"
            )
        for rank, writers in sorted(self._writers.items()):
            if len(writers) > 1 and rank not in self._said:
                self._said.add(rank)
                lines.append(claimed(rank, writers))
        return lines


class IndexRuns:
    """Whole numbers seen, as sorted runs of consecutive ones: few runs for indices in order."""

    __slots__ = ("_ends", "_starts")

    def __init__(self) -> None:
        """Hold no number yet."""
        self._starts: list[int] = []
        self._ends: list[int] = []  # run i holds _starts[i] to _ends[i]

    def __len__(self) -> int:
        """Return the number of runs (what the memory grows with)."""
        return len(self._starts)

    def add(self, index: int) -> bool:
        """Add `index`; return whether it is new."""
        starts, ends = self._starts, self._ends
        if ends and index == ends[-1] + 1:  # the usual case: the next window of a file
            ends[-1] = index
            return True
        at = bisect.bisect_right(starts, index) - 1  # the run starting at or before it
        if at >= 0 and index <= ends[at]:
            return False
        left = at >= 0 and ends[at] == index - 1
        right = at + 1 < len(starts) and starts[at + 1] == index + 1
        if left and right:
            ends[at] = ends[at + 1]
            del starts[at + 1], ends[at + 1]
        elif left:
            ends[at] = index
        elif right:
            starts[at + 1] = index
        else:
            starts.insert(at + 1, index)
            ends.insert(at + 1, index)
        return True


def claimed(rank: int, writers: dict[str, str | None]) -> str:
    """Return the warning for a rank written by several processes, naming each writer."""
    named = [
        f"{one_line(writer, 40)}" + (f" on {one_line(host, 60)}" if host else "")
        for writer, host in writers.items()
    ]
    shown = ", ".join(named[:-1]) + f" and {named[-1]}"
    return (
        f"rank {rank} was written by {len(writers)} processes ({shown}): two processes given "
        "the same RANK? Their records are kept apart, not counted as duplicates"
    )
