"""The windows of snapshot and flat metrics lines, each line checked as it is read.

A line whose values are not what looptrace writes is skipped with a warning (`reader`'s
`JsonLinesFile.reject`); the `Window`s go on to the summary, the report, compare and watch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from looptrace._offline.duplicates import Once
from looptrace._offline.no_gc import paused_gc
from looptrace._offline.rate_spread import rate_spreads
from looptrace._offline.reader import FLAT_KEY, SNAPSHOTS, JsonLinesFile, Warn, read_all, reading
from looptrace._stats.snapshot import SectionStats
from looptrace._stats.spread import RateSpread
from looptrace._stats.system_figures import FigureStats


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
    writer: str | None = None  # the process that wrote it (`writer` of the snapshot line)
    system: dict[str, FigureStats] | None = None  # the sampled figures of `system`, by name
    key: tuple[object, ...] | None = None  # what tells it from every other window (None: unknown)


def load_windows(kind: str, files: Sequence[JsonLinesFile], warn: Warn) -> list[Window]:
    """Return the windows of snapshot files or flat metrics files, in file order.

    A line whose values are not what looptrace writes (a count that is not a whole number, a
    duration that is not a finite number of seconds, a step beyond 2**63) is skipped with a
    warning; a window read twice counts once, and a rank written by two processes is named
    (`duplicates.Once`), each with one warning.
    """
    return list(read_windows(kind, files, warn))


def read_windows(kind: str, files: Sequence[JsonLinesFile], warn: Warn) -> Iterator[Window]:
    """Yield the windows of `load_windows` one at a time, its warnings after the last.

    A reader that folds each window as it comes (`summary_fold`) holds one at a time.
    """
    once = Once("window")
    with reading(files) as bar, paused_gc():
        for file, number, record in read_all(files, bar):
            try:
                window = _snapshot(record) if kind == SNAPSHOTS else _flat(record)
            except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:
                file.reject(number, f"is a malformed {kind} record ({error})")
                continue
            if once.first(window.key, window.rank, window.writer, window.host):
                yield window
    for line in once.warnings():
        warn(line)


def snapshot_window(record: dict[str, Any]) -> Window:
    """Return the window of one parsed snapshot line (`TypeError`, `ValueError` if malformed)."""
    return _snapshot(record)


_MAX_INT = 2**63
_MAX_SECONDS = 1e9  # 30 years: any larger duration is corrupt
_SECONDS_FIELDS = ("total", "mean", "min", "max", "std", "p50", "p90", "p99", "self_time")
_INT = {int}


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
        count = fields["count"]
        errors = fields.get("errors") or 0
        total, mean, low, high, std, p50, p90, p99, self_time = [
            _seconds(fields.get(name)) for name in _SECONDS_FIELDS
        ]
        stats[str(path)] = SectionStats(
            count if type(count) is int and 0 <= count < _MAX_INT else _whole(count, "count"),
            total, mean, low, high, std, p50, p90, p99, self_time,
            errors if type(errors) is int and 0 <= errors < _MAX_INT else _whole(errors, "errors"),
            _counts(buckets),
        )  # fmt: skip
    step = record.get("step")
    host = record.get("host")
    rank = _whole(record.get("rank") or 0, "rank")
    subtree = _subtree(record.get("subtree", "root"))
    writer, index = record.get("writer"), record.get("window")
    key: tuple[object, ...] | None = None
    if isinstance(writer, str) and index is not None:
        key = (writer, rank, subtree, _whole(index, "window"))
    elif record.get("start_ns") is not None and record.get("end_ns") is not None:
        key = (rank, subtree, step, record["start_ns"], record["end_ns"])
    return Window(
        rank=rank,
        step=None if step is None else _whole(step, "step"),
        host=host if isinstance(host, str) else None,
        stats=stats,
        spread=_spread(record.get("across_ranks")),
        subtree=subtree,
        steps=_steps(record.get("steps")),
        findings=_findings(record.get("findings")),
        seconds=_window_seconds(record),
        counted=_counted(record.get("rates")),
        mfu=_mfu(record.get("rates")),
        memory=_memory(record.get("memory")),
        rates_spread=rate_spreads(record.get("rates_across_ranks")),
        writer=writer if isinstance(writer, str) else None,
        system=_system(record.get("system")),
        key=key,
    )


def _counts(buckets: list[Any]) -> tuple[int, ...]:
    """Return bucket counts, each a whole number from 0 to 2**63 (`_whole`), checked fast."""
    if set(map(type, buckets)) <= _INT and (
        not buckets or 0 <= min(buckets) <= max(buckets) < _MAX_INT
    ):
        return tuple(buckets)
    return tuple(_whole(n, "a bucket count") for n in buckets)


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


def _system(value: object) -> dict[str, FigureStats] | None:
    """Return the figures of a `system` object: per name a finite mean and max, samples >= 1."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("system is not an object")
    figures = {}
    for name, stats in value.items():
        if not isinstance(stats, dict):
            raise TypeError(f"system figure {name!r} is not an object")
        mean, top = _finite(stats.get("mean"), name), _finite(stats.get("max"), name)
        samples = _whole(stats.get("samples"), f"samples of system figure {name!r}")
        if samples < 1:
            raise ValueError(f"system figure {name!r} has no sample")
        figures[str(name)] = FigureStats(mean, top, samples)
    return figures or None


def _finite(value: object, name: str) -> float:
    """Return a system figure's mean or max: a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"system figure {name!r} has a mean or max that is not a finite number")
    return float(value)


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
        path, rank = finding.get("path"), finding.get("rank")
        if not (path is None or isinstance(path, str)) or not (
            rank is None or (isinstance(rank, int) and not isinstance(rank, bool))
        ):
            raise TypeError("a finding's path is not a string or its rank not a whole number")
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
        match = FLAT_KEY.match(key)
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
    if type(value) is float and 0.0 <= value <= _MAX_SECONDS:  # the usual case, at once
        return value
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
