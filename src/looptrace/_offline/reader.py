"""Tolerant readers of JSON Lines files: OTLP/JSON spans, snapshots and flat metrics.

A file's kind is told by its first line. Later lines that cannot be read (a truncated last line
from a killed process, a corrupt line) are skipped with a warning; a missing file, or one whose
first line is of another format, is an `InputError` (one line for the user). What the lines
hold comes next: windows (`window_records`), spans (`span_records`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from looptrace._export.records import HANG_KINDS, LOSS_KIND, SNAPSHOT_KIND
from looptrace._offline.inputs import expand_inputs
from looptrace._offline.json_loads import loads
from looptrace._offline.progress import ByteProgress, Progress
from looptrace._offline.text import one_line
from looptrace._stats.snapshot import METRIC_STATS

Warn = Callable[[str], None]

SPANS = "span"
SNAPSHOTS = "snapshot"
METRICS = "metrics"

# `<prefix>.root.<...>.<stat>`: the first `root` component starts the path.
FLAT_KEY = re.compile(r"^(?:.*?\.)??(root(?:\.[^.]+)*?)\.(" + "|".join(METRIC_STATS) + r")$")
_WARNINGS_PER_FILE = 3
_DETECT_LINES = 1000  # lines of no known kind before a file is called foreign
_NOT_WINDOWS = HANG_KINDS | {LOSS_KIND}  # lines of a snapshot file that hold no window


class InputError(Exception):
    """Input a command cannot use; the message is one line naming the file and the problem."""


def line_kind(record: object) -> str | None:
    """Return a parsed line's `kind` when it is a string (None: absent, or another value)."""
    kind = record.get("kind") if isinstance(record, dict) else None
    return kind if isinstance(kind, str) else None


def kind_of(record: object) -> str | None:
    """Return the kind of one parsed line, or None if it is none of looptrace's."""
    if not isinstance(record, dict) or record.get("kind") == LOSS_KIND:
        return None
    if "resourceSpans" in record:
        return SPANS
    if record.get("kind") == SNAPSHOT_KIND:
        return SNAPSHOTS
    if any(isinstance(key, str) and FLAT_KEY.match(key) for key in record):
        return METRICS
    return None


class JsonLinesFile:
    """One input file: its kind (None when it holds no complete line) and its records."""

    def __init__(self, name: str, warn: Warn) -> None:
        self.name = name
        self.path = Path(name)
        self._warn = warn
        if not self.path.exists():
            raise InputError(f"{name}: no such file")
        if not self.path.is_file():
            raise InputError(f"{name}: not a file")
        self.size = self.path.stat().st_size
        self.lost: dict[str, int] = {}  # spans or windows the writer recorded as lost
        self._rejected = 0
        self.kind = self._detect()

    def _detect(self) -> str | None:
        """Return the kind of the first line of a known kind; bad lines before it are skipped.

        `records()` warns about them as about any other bad line. A file whose first readable
        lines are all of no known kind is not looptrace's.
        """
        foreign: tuple[int, dict[str, object]] | None = None
        unreadable: int | None = None  # the first complete line that is not JSON
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                if number > _DETECT_LINES and foreign is not None:
                    break
                if not raw.strip():
                    continue
                try:
                    record = loads(raw)
                except (ValueError, RecursionError):
                    if unreadable is None and raw.endswith(b"\n"):
                        unreadable = number
                    continue  # a bad line, wherever it is; records() warns about it
                if line_kind(record) in _NOT_WINDOWS:
                    continue
                kind = kind_of(record)
                if kind is not None:
                    return kind
                if isinstance(record, dict) and foreign is None:
                    foreign = number, record
        if foreign is None and unreadable is not None:
            raise InputError(
                f"{self.name}: line {unreadable} is not JSON; expected looptrace span, "
                "snapshot or metrics JSON lines (and no line is one)"
            )
        if foreign is None:
            return None
        number, record = foreign
        keys = one_line(", ".join(str(key) for key in list(record)[:4]) if record else "none")
        raise InputError(
            f"{self.name}: not a looptrace span, snapshot or metrics file "
            f"(line {number} has keys: {keys})"
        )

    def records(self, bar: Progress) -> Iterator[tuple[int, dict[str, Any]]]:
        """Yield `(line number, record)` of every readable line of this file's kind."""
        skipped: list[int] = []
        self._rejected = 0
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                bar.update(len(raw))
                if not raw.strip():
                    continue
                try:
                    record = loads(raw)
                except (ValueError, RecursionError):
                    if not raw.endswith(b"\n"):
                        self._warn(
                            f"{self.name}: line {number} is truncated (a writer killed "
                            "mid-line?); skipped"
                        )
                    else:
                        skipped.append(number)
                    continue
                if line_kind(record) in _NOT_WINDOWS:
                    if record.get("kind") == LOSS_KIND:
                        self._count_loss(record, number)
                    continue  # (hang lines: `hangs.read_hangs`)
                if kind_of(record) != self.kind:
                    skipped.append(number)
                    continue
                yield number, record
        self.skipped(skipped)
        if self._rejected > _WARNINGS_PER_FILE:
            more = self._rejected - _WARNINGS_PER_FILE
            self._warn(f"{self.name}: skipped {more} more malformed line{'s' * (more > 1)}")

    def reject(self, number: int, problem: str) -> None:
        """Warn that line `number` is malformed and skipped (a few per file, then a count)."""
        self._rejected += 1
        if self._rejected <= _WARNINGS_PER_FILE:
            self._warn(f"{self.name}: line {number} {one_line(problem)}; skipped")

    def _count_loss(self, record: dict[str, Any], number: int) -> None:
        for what in ("spans", "windows"):
            count = record.get(what)
            if count is None:
                continue
            if isinstance(count, bool) or not isinstance(count, int) or not 0 < count < 2**63:
                self.reject(number, "is a malformed loss record")
                return
            self.lost[what] = self.lost.get(what, 0) + count

    def skipped(self, numbers: list[int]) -> None:
        """Warn about unreadable lines: a few by number, the rest as a count."""
        if not numbers:
            return
        shown = ", ".join(str(n) for n in numbers[:_WARNINGS_PER_FILE])
        more = len(numbers) - _WARNINGS_PER_FILE
        tail = f" and {more} more" if more > 0 else ""
        noun = "line" if len(numbers) == 1 else "lines"
        self._warn(f"{self.name}: skipped unreadable {noun} {shown}{tail}")


def open_inputs(
    names: Sequence[str], warn: Warn, prefer: Sequence[str] = (SPANS, SNAPSHOTS, METRICS)
) -> tuple[str, list[JsonLinesFile]]:
    """Open the inputs named (`expand_inputs`); return their kind and the files that hold records.

    Files named one by one must be of one kind. A directory or a glob may hold several: the
    files of the first kind of `prefer` found are read, the others left out with a warning;
    a file in it that is not looptrace's is skipped with a warning.
    """
    named = set(names)
    files = []
    for name in expand_inputs(names, warn):
        try:
            files.append(JsonLinesFile(name, warn))
        except InputError as error:
            if name in named:
                raise
            warn(f"{error}; skipped")
    usable = []
    for file in files:
        if file.kind is None:
            content = file.path.read_bytes()
            if content.strip() and not content.endswith(b"\n"):
                warn(f"{file.name}: only a truncated line (a writer killed mid-line?); skipped")
            else:
                warn(f"{file.name}: empty; skipped")
        else:
            usable.append(file)
    if not usable:
        raise InputError(f"no records in {', '.join(names)}")
    explicit = [file for file in usable if file.name in named]
    if len({file.kind for file in explicit}) > 1:
        described = ", ".join(f"{file.name} is a {file.kind} file" for file in explicit)
        raise InputError(f"cannot mix files of different kinds: {described}")
    kinds = {file.kind for file in usable}
    kind = explicit[0].kind if explicit else next((k for k in prefer if k in kinds), None)
    kind = kind or sorted(k or "" for k in kinds)[0]
    left_out = [file for file in usable if file.kind != kind]
    if left_out:
        shown = ", ".join(file.name for file in left_out[:3])
        more = f" and {len(left_out) - 3} more" if len(left_out) > 3 else ""
        warn(f"{shown}{more}: not {kind} files; left out (name them alone to read them)")
    return kind, [file for file in usable if file.kind == kind]


def read_all(
    files: Sequence[JsonLinesFile], bar: Progress
) -> Iterator[tuple[JsonLinesFile, int, dict[str, Any]]]:
    """Yield `(file, line number, record)` of all files, advancing `bar` by bytes read."""
    for file in files:
        for number, record in file.records(bar):
            yield file, number, record


def reading(files: Sequence[JsonLinesFile], desc: str = "reading") -> ByteProgress:
    """Return a progress bar over the bytes of `files`."""
    return ByteProgress(sum(file.size for file in files), desc)
