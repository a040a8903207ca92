"""Tolerant readers of JSON Lines files: OTLP/JSON spans, snapshots and flat metrics.

A file's kind is told by its first line. Later lines that cannot be read (a truncated last line
from a killed process, a corrupt line) are skipped with a warning; a missing file, or one whose
first line is of another format, is an `InputError` (one line for the user).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looptrace._files import SNAPSHOT_KIND
from looptrace._progress import ByteProgress, Progress
from looptrace._snapshot import METRIC_STATS, SectionStats

Warn = Callable[[str], None]

SPANS = "span"
SNAPSHOTS = "snapshot"
METRICS = "metrics"

# `<prefix>.root.<...>.<stat>`: the first `root` component starts the path.
_FLAT_KEY = re.compile(r"^(?:.*?\.)??(root(?:\.[^.]+)*?)\.(" + "|".join(METRIC_STATS) + r")$")
_WARNINGS_PER_FILE = 3


class InputError(Exception):
    """Input a command cannot use; the message is one line naming the file and the problem."""


def kind_of(record: object) -> str | None:
    """Return the kind of one parsed line, or None if it is none of looptrace's."""
    if not isinstance(record, dict):
        return None
    if "resourceSpans" in record:
        return SPANS
    if record.get("kind") == SNAPSHOT_KIND:
        return SNAPSHOTS
    if any(isinstance(key, str) and _FLAT_KEY.match(key) for key in record):
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
        self.kind = self._detect()

    def _detect(self) -> str | None:
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw)
                except ValueError:
                    if not raw.endswith(b"\n"):
                        return None  # only a truncated line; records() warns about it
                    raise InputError(
                        f"{self.name}: line {number} is not JSON; expected looptrace span, "
                        "snapshot or metrics JSON lines"
                    ) from None
                kind = kind_of(record)
                if kind is None:
                    keys = ", ".join(list(record)[:4]) if isinstance(record, dict) else "none"
                    raise InputError(
                        f"{self.name}: not a looptrace span, snapshot or metrics file "
                        f"(line {number} has keys: {keys})"
                    )
                return kind
        return None

    def records(self, bar: Progress) -> Iterator[tuple[int, dict[str, Any]]]:
        """Yield `(line number, record)` of every readable line of this file's kind."""
        skipped: list[int] = []
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                bar.update(len(raw))
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw)
                except ValueError:
                    if not raw.endswith(b"\n"):
                        self._warn(
                            f"{self.name}: line {number} is truncated (a writer killed "
                            "mid-line?); skipped"
                        )
                    else:
                        skipped.append(number)
                    continue
                if kind_of(record) != self.kind:
                    skipped.append(number)
                    continue
                yield number, record
        self.skipped(skipped)

    def skipped(self, numbers: list[int]) -> None:
        """Warn about unreadable lines: a few by number, the rest as a count."""
        if not numbers:
            return
        shown = ", ".join(str(n) for n in numbers[:_WARNINGS_PER_FILE])
        more = len(numbers) - _WARNINGS_PER_FILE
        tail = f" and {more} more" if more > 0 else ""
        noun = "line" if len(numbers) == 1 else "lines"
        self._warn(f"{self.name}: skipped unreadable {noun} {shown}{tail}")


def open_inputs(names: Sequence[str], warn: Warn) -> tuple[str, list[JsonLinesFile]]:
    """Open every named file; return their common kind and the files that hold records."""
    files = [JsonLinesFile(name, warn) for name in names]
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
    kinds = {file.kind for file in usable}
    if len(kinds) > 1:
        described = ", ".join(f"{file.name} is a {file.kind} file" for file in usable)
        raise InputError(f"cannot mix files of different kinds: {described}")
    return usable[0].kind or "", usable


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


@dataclass(frozen=True, slots=True)
class Window:
    """One window of statistics of one rank: a snapshot line or a flat metrics line."""

    rank: int
    step: int | None
    host: str | None
    stats: dict[str, SectionStats]
    spread: dict[str, dict[str, Any]] | None = None  # `across_ranks` of the snapshot line


def load_windows(kind: str, files: Sequence[JsonLinesFile], warn: Warn) -> list[Window]:
    """Return the windows of snapshot files or flat metrics files, in file order."""
    windows: list[Window] = []
    with reading(files) as bar:
        for file, number, record in read_all(files, bar):
            try:
                window = _snapshot(record) if kind == SNAPSHOTS else _flat(record, number)
            except (TypeError, ValueError, KeyError, AttributeError) as error:
                warn(f"{file.name}: line {number} is a malformed {kind} record ({error}); skipped")
                continue
            windows.append(window)
    return windows


def _snapshot(record: dict[str, Any]) -> Window:
    stats = {
        str(path): SectionStats(
            count=int(fields["count"]),
            total=_number(fields.get("total")),
            mean=_number(fields.get("mean")),
            min=_number(fields.get("min")),
            max=_number(fields.get("max")),
            std=_number(fields.get("std")),
            p50=_number(fields.get("p50")),
            p90=_number(fields.get("p90")),
            p99=_number(fields.get("p99")),
            self_time=_number(fields.get("self_time")),
            errors=int(fields.get("errors") or 0),
            buckets=tuple(int(n) for n in fields.get("buckets") or ()),
        )
        for path, fields in record["stats"].items()
    }
    step = record.get("step")
    spread = record.get("across_ranks")
    return Window(
        rank=int(record.get("rank") or 0),
        step=None if step is None else int(step),
        host=record.get("host"),
        stats=stats,
        spread=spread if isinstance(spread, dict) else None,
    )


def _flat(record: dict[str, Any], number: int) -> Window:
    fields: dict[str, dict[str, float]] = {}
    for key, value in record.items():
        match = _FLAT_KEY.match(key)
        if match and isinstance(value, int | float) and not isinstance(value, bool):
            fields.setdefault(match[1], {})[match[2]] = float(value)
    stats = {
        path: SectionStats(
            count=int(values.get("count", 0)),
            total=values.get("total", math.nan),
            mean=values.get("mean", math.nan),
            min=values.get("min", math.nan),
            max=values.get("max", math.nan),
            std=values.get("std", math.nan),
            p50=values.get("p50", math.nan),
            p90=values.get("p90", math.nan),
            p99=values.get("p99", math.nan),
            self_time=values.get("self_time", math.nan),
            errors=0,
            buckets=(),
        )
        for path, values in fields.items()
    }
    step = record.get("step")
    return Window(
        rank=int(record.get("rank") or 0),
        step=int(step) if isinstance(step, int | float) else number - 1,
        host=None,
        stats=stats,
    )


def _number(value: object) -> float:
    return math.nan if value is None else float(value)  # type: ignore[arg-type]
