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

from looptrace._export.records import LOSS_KIND, SNAPSHOT_KIND
from looptrace._offline.progress import ByteProgress, Progress
from looptrace._offline.rate_spread import rate_spreads
from looptrace._offline.text import one_line
from looptrace._stats.snapshot import METRIC_STATS, SectionStats
from looptrace._stats.spread import RateSpread

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
    if not isinstance(record, dict) or record.get("kind") == LOSS_KIND:
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
        self.lost: dict[str, int] = {}  # spans or windows the writer recorded as lost
        self._rejected = 0
        self.kind = self._detect()

    def _detect(self) -> str | None:
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw)
                except (ValueError, RecursionError):
                    if not raw.endswith(b"\n"):
                        return None  # only a truncated line; records() warns about it
                    raise InputError(
                        f"{self.name}: line {number} is not JSON; expected looptrace span, "
                        "snapshot or metrics JSON lines"
                    ) from None
                if isinstance(record, dict) and record.get("kind") == LOSS_KIND:
                    continue
                kind = kind_of(record)
                if kind is None:
                    keys = ", ".join(list(record)[:4]) if isinstance(record, dict) else "none"
                    keys = one_line(keys)
                    raise InputError(
                        f"{self.name}: not a looptrace span, snapshot or metrics file "
                        f"(line {number} has keys: {keys})"
                    )
                return kind
        return None

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
                    record = json.loads(raw)
                except (ValueError, RecursionError):
                    if not raw.endswith(b"\n"):
                        self._warn(
                            f"{self.name}: line {number} is truncated (a writer killed "
                            "mid-line?); skipped"
                        )
                    else:
                        skipped.append(number)
                    continue
                if isinstance(record, dict) and record.get("kind") == LOSS_KIND:
                    self._count_loss(record, number)
                    continue
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
    subtree: str = "root"  # the timer whose window it is (`timer.reset()`)
    steps: tuple[int, int] | None = None  # the first and last step it holds time of
    findings: tuple[dict[str, Any], ...] = ()  # what the window's diagnosis found
    seconds: float = 0.0  # its wall time (`end_ns - start_ns`; 0 where the line lacks them)
    counted: dict[tuple[str, str], float] | None = None  # `rates` totals by (path, unit)
    mfu: dict[tuple[str, str], float] | None = None  # `rates` MFU by (path, unit), where known
    memory: dict[str, int] | None = None  # the measured figures of `memory`, bytes
    rates_spread: dict[tuple[str, str], RateSpread] | None = None  # `rates_across_ranks`


def load_windows(kind: str, files: Sequence[JsonLinesFile], warn: Warn) -> list[Window]:
    """Return the windows of snapshot files or flat metrics files, in file order.

    A line whose values are not what looptrace writes (a count that is not a whole number, a
    duration that is not a finite number of seconds, a step beyond 2**63) is skipped with a
    warning; `warn` is kept for callers that pass it.
    """
    del warn
    windows: list[Window] = []
    with reading(files) as bar:
        for file, number, record in read_all(files, bar):
            try:
                window = _snapshot(record) if kind == SNAPSHOTS else _flat(record)
            except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:
                file.reject(number, f"is a malformed {kind} record ({error})")
                continue
            windows.append(window)
    return windows


def snapshot_window(record: dict[str, Any]) -> Window:
    """Return the window of one parsed snapshot line (`TypeError`, `ValueError` if malformed)."""
    return _snapshot(record)


_MAX_INT = 2**63
_MAX_SECONDS = 1e9  # 30 years: any larger duration is corrupt


def _snapshot(record: dict[str, Any]) -> Window:
    stats_field = record["stats"]
    if not isinstance(stats_field, dict):
        raise TypeError("stats is not an object")
    stats = {}
    for path, fields in stats_field.items():
        if not isinstance(fields, dict):
            raise TypeError(f"the statistics of {path!r} are not an object")
        buckets = fields.get("buckets")
        buckets = [] if buckets is None else buckets
        if not isinstance(buckets, list) or len(buckets) > 10_000:
            raise TypeError("buckets is not a list of counts")
        stats[str(path)] = SectionStats(
            count=_whole(fields["count"], "count"),
            total=_seconds(fields.get("total")),
            mean=_seconds(fields.get("mean")),
            min=_seconds(fields.get("min")),
            max=_seconds(fields.get("max")),
            std=_seconds(fields.get("std")),
            p50=_seconds(fields.get("p50")),
            p90=_seconds(fields.get("p90")),
            p99=_seconds(fields.get("p99")),
            self_time=_seconds(fields.get("self_time")),
            errors=_whole(fields.get("errors") or 0, "errors"),
            buckets=tuple(_whole(n, "a bucket count") for n in buckets),
        )
    step = record.get("step")
    host = record.get("host")
    return Window(
        rank=_whole(record.get("rank") or 0, "rank"),
        step=None if step is None else _whole(step, "step"),
        host=host if isinstance(host, str) else None,
        stats=stats,
        spread=_spread(record.get("across_ranks")),
        subtree=_subtree(record.get("subtree", "root")),
        steps=_steps(record.get("steps")),
        findings=_findings(record.get("findings")),
        seconds=_window_seconds(record),
        counted=_counted(record.get("rates")),
        mfu=_mfu(record.get("rates")),
        memory=_memory(record.get("memory")),
        rates_spread=rate_spreads(record.get("rates_across_ranks")),
    )


def _window_seconds(record: dict[str, Any]) -> float:
    """Return a snapshot line's wall time in seconds, 0 where it lacks its ends."""
    start, end = record.get("start_ns"), record.get("end_ns")
    if start is None or end is None:
        return 0.0
    return max(_whole(end, "end_ns") - _whole(start, "start_ns"), 0) / 1e9


def _counted(value: object) -> dict[tuple[str, str], float] | None:
    """Return the unit totals of a `rates` object by (path, unit)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("rates is not an object")
    counted: dict[tuple[str, str], float] = {}
    for path, units in value.items():
        if not isinstance(units, dict):
            raise TypeError(f"rates of {path!r} is not an object")
        for unit, rate in units.items():
            if not isinstance(rate, dict):
                raise TypeError(f"rate of {unit!r} of {path!r} is not an object")
            total = rate.get("total")
            if isinstance(total, bool) or not isinstance(total, int | float) or not total >= 0:
                raise TypeError(f"rate of {unit!r} of {path!r} has no total >= 0")
            counted[str(path), str(unit)] = float(total)
    return counted


def _mfu(value: object) -> dict[tuple[str, str], float] | None:
    """Return the MFU of a `rates` object by (path, unit), where a window has one."""
    if not isinstance(value, dict):
        return None  # (`_counted` says what is wrong with it)
    found: dict[tuple[str, str], float] = {}
    for path, units in value.items():
        for unit, rate in units.items():
            mfu = rate.get("mfu")
            if mfu is None:
                continue
            if isinstance(mfu, bool) or not isinstance(mfu, int | float) or not mfu >= 0:
                raise TypeError(f"rate of {unit!r} of {path!r} has an mfu that is not >= 0")
            found[str(path), str(unit)] = float(mfu)
    return found or None


def _memory(value: object) -> dict[str, int] | None:
    """Return the measured figures of a `memory` object (None values left out)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("memory is not an object")
    return {str(k): _whole(v, f"memory {k}") for k, v in value.items() if v is not None}


def _steps(value: object) -> tuple[int, int] | None:
    """Return the `steps` of a snapshot line: `[first, last]`, or None when absent."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise TypeError("steps is not [first, last]")
    first, last = _whole(value[0], "steps"), _whole(value[1], "steps")
    if first > last:
        raise ValueError("steps has its first step after its last")
    return first, last


def _findings(value: object) -> tuple[dict[str, Any], ...]:
    """Return the `findings` of a snapshot line, each with its text fields checked."""
    if value is None:  # nothing found, or written before looptrace diagnosed windows
        return ()
    if not isinstance(value, list):
        raise TypeError("findings is not a list")
    for finding in value:
        if not isinstance(finding, dict) or not all(
            isinstance(finding.get(key), str) for key in ("kind", "severity", "message")
        ):
            raise TypeError("a finding is not an object with kind, severity and message")
    return tuple(value)


def _subtree(value: object) -> str:
    """Return the `subtree` of a snapshot line: a timer's dotted path."""
    if not isinstance(value, str) or not value:
        raise TypeError("subtree is not a timer path")
    return value


def _spread(value: object) -> dict[str, dict[str, Any]] | None:
    """Return the `across_ranks` object with the fields the summary reads checked."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("across_ranks is not an object")
    checked: dict[str, dict[str, Any]] = {}
    for path, spread in value.items():
        if not isinstance(spread, dict):
            raise TypeError(f"across_ranks of {path!r} is not an object")
        mean = spread.get("mean")
        if mean is not None and not isinstance(mean, dict):
            raise TypeError(f"across_ranks of {path!r} has no mean object")
        if mean:
            low, high, slowest = mean.get("min"), mean.get("max"), mean.get("slowest_rank")
            for number in (low, high):
                if number is not None:
                    _seconds(number)
            if slowest is not None:
                _whole(slowest, "slowest_rank")
        checked[str(path)] = spread
    return checked


def _flat(record: dict[str, Any]) -> Window:
    fields: dict[str, dict[str, float]] = {}
    for key, value in record.items():
        match = _FLAT_KEY.match(key)
        if match and isinstance(value, int | float) and not isinstance(value, bool):
            if match[2] == "count":
                fields.setdefault(match[1], {})["count"] = _whole(value, key)
            else:
                fields.setdefault(match[1], {})[match[2]] = _seconds(value)
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
        rank=_whole(record.get("rank") or 0, "rank"),
        step=None if step is None else _whole(step, "step"),
        host=None,
        stats=stats,
    )


def _whole(value: object, what: str) -> int:
    """Return a count, rank or step: a whole number from 0 to 2**63 (as JSON has it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} is not a number")
    if not (0 <= value < _MAX_INT and float(value).is_integer()):
        raise ValueError(f"{what} is not a whole number from 0 to 2**63")
    return int(value)


def _seconds(value: object) -> float:
    """Return a duration in seconds (None: undefined, NaN): from 0 to 30 years."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("a duration is not a number")
    seconds = float(value)
    if math.isnan(seconds):  # json.dumps writes an undefined statistic as NaN
        return seconds
    if not 0 <= seconds <= _MAX_SECONDS:
        raise ValueError("a duration is not a number of seconds from 0 to 1e9")
    return seconds
