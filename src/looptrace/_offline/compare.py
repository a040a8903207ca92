"""`looptrace compare`: did a change make training slower? Two sets of snapshot files, per path.

Per path the command compares the mean of the windows' p50 (as a relative change) and of the
windows' share of the main timer's lap (in percentage points), each with a 95 % bootstrap
interval over ranks (`resample`): each rank's windows summed, the ranks of each side resampled
with replacement, or, where one rank ran the path, moving blocks of its windows; a fixed seed,
so the same files always give the same answer. A path is a regression beyond PCT when its p50
grew by more than PCT and the interval excludes zero, and only where there is evidence enough
to judge it: at least `min_windows` windows a side and a change of its time per lap of at least
`min_impact` % of the main timer's lap. The units a resample draws are at least two by
construction (two ranks, or two blocks of one rank's windows), so windows are the one count the
gate asks for. The paths whose p50 grew beyond PCT without that evidence are listed with the
reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from itertools import chain

from looptrace._base.units import format_seconds
from looptrace._offline.inputs import expand_inputs
from looptrace._offline.reader import SPANS, InputError, JsonLinesFile, Warn, open_inputs
from looptrace._offline.report_data import main_timer
from looptrace._offline.resample import RESAMPLES, Resampler, units
from looptrace._offline.text import escaped
from looptrace._offline.window_records import Window, load_windows
from looptrace._stats.partial import partial_window
from looptrace._stats.snapshot import SectionStats

LEVEL = 0.95
MIN_WINDOWS = 3  # windows a side before a path can fail the gate
MIN_IMPACT_PCT = 1.0  # of the main timer's lap: a smaller change cannot fail the gate


@dataclass(frozen=True)
class PathChange:
    """The change of one path from the baseline to the candidate (NaN where undefined)."""

    path: str
    base_p50: float
    cand_p50: float
    p50_change_pct: float
    p50_low_pct: float
    p50_high_pct: float
    base_share_pct: float
    cand_share_pct: float
    share_change_pp: float
    share_low_pp: float
    share_high_pp: float
    impact_s: float  # change of the path's time per lap of the main timer
    base_windows: int
    cand_windows: int
    flagged: bool = False
    impact_pct: float = math.nan  # `impact_s` as a share of the baseline's lap, in %
    unjudged: str = ""  # why the gate could not judge the path ("": it could)
    base_ranks: int = 0  # ranks whose windows ran the path (1: the interval resamples blocks)
    cand_ranks: int = 0


def load_side(name: str, warn: Warn) -> list[Window]:
    """Return the windows of one side: a snapshot or metrics file, a directory or a glob."""
    names = expand_inputs([name], warn)
    if names != [name]:  # a directory or a glob: its snapshot (or metrics) files
        names = [n for n in names if JsonLinesFile(n, warn).kind != SPANS]
    if not names:
        raise InputError(f"{name}: no snapshot files")
    kind, files = open_inputs(names, warn)
    if kind == SPANS:
        raise InputError(f"compare needs snapshot files; {files[0].name} is a span file")
    windows = [  # a partial window (no whole lap) says nothing of a section's p50 or share
        w
        for w in load_windows(kind, files, warn)
        if w.subtree == "root" and not partial_window(w.stats)
    ]
    if not windows:
        raise InputError(f"{name}: no readable windows")
    return windows


@dataclass(frozen=True)
class Gate:
    """What a path needs to fail `--max-regression`: a threshold, and evidence to judge it."""

    max_regression: float | None = None
    min_windows: int = MIN_WINDOWS
    min_impact_pct: float = MIN_IMPACT_PCT

    def why_not(self, windows: int, impact_pct: float) -> str:
        """Return why a path of `windows` windows a side (the fewer) cannot be judged, or ""."""
        if windows < self.min_windows:
            return f"{windows} window{'s' * (windows != 1)} a side, needs {self.min_windows}"
        if math.isnan(impact_pct) or abs(impact_pct) < self.min_impact_pct:
            shown = "?" if math.isnan(impact_pct) else f"{abs(impact_pct):.2g}%"
            return f"{shown} of the step, needs {self.min_impact_pct:g}%"
        return ""


def compare(
    base: Sequence[Window], cand: Sequence[Window], max_regression: float | Gate | None = None
) -> tuple[str, list[PathChange]]:
    """Return the main timer and the change of every path, largest impact first."""
    gate = max_regression if isinstance(max_regression, Gate) else Gate(max_regression)
    timer = _main_timer(base)
    before, after = _columns(base, timer), _columns(cand, timer)
    resampler = Resampler()
    lap_s = _known_mean(before.get(timer, {}), PER_LAP)[0]
    changes = [
        _change(
            path,
            before.get(path, {}),
            after.get(path, {}),
            resampler=resampler,
            gate=gate,
            lap_s=lap_s,
        )
        for path in sorted(before.keys() | after.keys())
    ]
    changes.sort(key=lambda c: (-_abs_or_zero(c.impact_s), c.path))
    return timer, changes


def _main_timer(windows: Sequence[Window]) -> str:
    """Return `main_timer` of the windows merged, from the outermost paths' laps and time."""
    paths = set[str]().union(*(window.stats.keys() for window in windows))
    merged = {}  # the count and total of `merge_windows`, without merging every quantile
    for path in sorted(paths):
        if _has_ancestor(path, paths):
            continue
        parts = [stats for window in windows if (stats := window.stats.get(path)) is not None]
        times = _known_sum([part.total for part in parts])[0]
        count = sum(part.count for part in parts)
        merged[path] = replace(SectionStats.empty(total=times), count=count)
    return main_timer(merged)


def _has_ancestor(path: str, paths: set[str]) -> bool:
    head = path.rpartition(".")[0]
    while head:
        if head in paths:
            return True
        head = head.rpartition(".")[0]
    return False


def _abs_or_zero(value: float) -> float:
    return 0.0 if math.isnan(value) else abs(value)


P50, SHARE, PER_LAP = range(3)  # a window's p50, share of the main timer's lap, time per lap
Columns = tuple[list[float], list[float], list[float]]  # a rank's, in window order
ByRank = dict[int, Columns]  # a path's columns by rank


def _columns(windows: Sequence[Window], timer: str) -> dict[str, ByRank]:
    """Return the p50, share of the lap and time per lap of each window, by path and rank."""
    ranks: dict[int, list[Window]] = {}
    for window in windows:
        ranks.setdefault(window.rank, []).append(window)
    by_path: dict[str, ByRank] = {}
    for rank, own in ranks.items():
        for path, rows in _rows(own, timer).items():
            p50s, shares, per_laps = map(list, zip(*rows, strict=True))
            by_path.setdefault(path, {})[rank] = (p50s, shares, per_laps)
    return by_path


_UNKNOWN = (math.nan, math.nan, math.nan)


def _rows(windows: Sequence[Window], timer: str) -> dict[str, list[tuple[float, float, float]]]:
    """Return the `(p50, share of the lap, time per lap)` of each window, by path."""
    rows: dict[str, list[tuple[float, float, float]]] = {}
    for window in windows:
        lap = window.stats.get(timer)
        lap_total = lap_count = math.nan  # NaN: no share, no time per lap
        if lap is not None and lap.count and lap.total > 0:
            lap_total, lap_count = lap.total, lap.count
        for path, stats in window.stats.items():
            if not stats.count:
                continue
            p50 = stats.p50
            row = (p50, stats.total / lap_total, stats.total / lap_count)
            if math.isnan(p50):  # rare: the window says nothing of the path
                row = _UNKNOWN
            known = rows.get(path)
            if known is None:
                rows[path] = [row]
            else:
                known.append(row)
    return rows


def _known_sum(values: list[float]) -> tuple[float, int]:
    """Return the exact sum and the count of the values that are not NaN (NaN, 0: none is)."""
    total = math.fsum(values)
    if math.isnan(total):  # rare: a window without a lap of the main timer
        values = [v for v in values if not math.isnan(v)]
        total = math.fsum(values) if values else math.nan
    return total, len(values)


def _known_mean(by_rank: ByRank, column: int) -> tuple[float, int]:
    """Return the mean and the count of one column's known values over every rank's windows."""
    total, count = _known_sum(list(chain.from_iterable(c[column] for c in by_rank.values())))
    return (total / count if count else math.nan), count


def _ratio(before: float, after: float) -> float:
    return 100 * (after / before - 1) if before > 0 else math.nan


def _points(before: float, after: float) -> float:
    return 100 * (after - before)


def _change(
    path: str, before: ByRank, after: ByRank, *, resampler: Resampler, gate: Gate, lap_s: float
) -> PathChange:
    (p50_b, windows_b), (p50_a, windows_a) = _known_mean(before, P50), _known_mean(after, P50)
    share_b, share_a = _known_mean(before, SHARE)[0], _known_mean(after, SHARE)[0]
    p50_change = _ratio(p50_b, p50_a)
    p50_low, p50_high = _interval(before, after, P50, _ratio, resampler)
    share_low, share_high = _interval(before, after, SHARE, _points, resampler)
    impact = _known_mean(after, PER_LAP)[0] - _known_mean(before, PER_LAP)[0]
    impact_pct = 100 * impact / lap_s if lap_s > 0 else math.nan
    unjudged = gate.why_not(min(windows_b, windows_a), impact_pct)
    flagged = (
        gate.max_regression is not None
        and not unjudged
        and not math.isnan(p50_change)
        and p50_change > gate.max_regression
        and p50_low > 0
    )
    return PathChange(
        path=path,
        base_p50=p50_b,
        cand_p50=p50_a,
        p50_change_pct=p50_change,
        p50_low_pct=p50_low,
        p50_high_pct=p50_high,
        base_share_pct=100 * share_b,
        cand_share_pct=100 * share_a,
        share_change_pp=_points(share_b, share_a),
        share_low_pp=share_low,
        share_high_pp=share_high,
        impact_s=impact,
        base_windows=windows_b,
        cand_windows=windows_a,
        flagged=flagged,
        impact_pct=impact_pct,
        unjudged=unjudged,
        base_ranks=len(before),
        cand_ranks=len(after),
    )


def _interval(
    before: ByRank,
    after: ByRank,
    field: int,
    statistic: Callable[[float, float], float],
    resampler: Resampler,
) -> tuple[float, float]:
    """Return the bootstrap interval of `statistic` of one field; NaN with under 2 values a side."""
    units_b = units([columns[field] for columns in before.values()])
    units_a = units([columns[field] for columns in after.values()])
    if units_b is None or units_a is None:
        return math.nan, math.nan
    means_b = resampler.means("base", units_b)
    means_a = resampler.means("candidate", units_a)
    values = sorted(v for v in map(statistic, means_b, means_a) if not math.isnan(v))
    if not values:
        return math.nan, math.nan
    tail = (1 - LEVEL) / 2
    low = values[int(tail * (len(values) - 1))]
    high = values[math.ceil((1 - tail) * (len(values) - 1))]
    return low, high


def _pct(value: float, unit: str = "%") -> str:
    return "-" if math.isnan(value) else f"{value:+.1f}{unit}"


def _range(low: float, high: float, unit: str = "%") -> str:
    if math.isnan(low):
        return "-"
    return f"[{low:+.1f}, {high:+.1f}]{unit}"


def render(timer: str, changes: Sequence[PathChange], max_regression: float | None) -> str:
    """Return the comparison as an aligned table, largest impact first, and its verdict."""
    header = (
        "section", "base p50", "cand p50", "p50 change", "95% interval",
        "share", "share change", "95% interval", "per lap",
    )  # fmt: skip
    rows = [header]
    for c in changes:
        share = "-" if math.isnan(c.cand_share_pct) else f"{c.cand_share_pct:.1f}%"
        rows.append(
            (
                ("! " if c.flagged else "  ") + escaped(c.path),
                format_seconds(c.base_p50),
                format_seconds(c.cand_p50),
                _pct(c.p50_change_pct),
                _range(c.p50_low_pct, c.p50_high_pct),
                share,
                _pct(c.share_change_pp, " pp"),
                _range(c.share_low_pp, c.share_high_pp, " pp"),
                "-" if math.isnan(c.impact_s) else _signed_seconds(c.impact_s),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            [
                row[0].ljust(widths[0]),
                *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)),
            ]
        )
        for row in rows
    ]
    lines.append("")
    lines.append(
        f"share: of a lap of {escaped(timer)}; per lap: the change of the section's time per lap; "
        f"intervals: {LEVEL:.0%} bootstrap over ranks (one rank: blocks of its windows), "
        f"{RESAMPLES} resamples"
    )
    flagged = [c for c in changes if c.flagged]
    if max_regression is not None:
        if flagged:
            names = ", ".join(f"{escaped(c.path)} ({c.p50_change_pct:+.1f}%)" for c in flagged)
            lines.append(f"REGRESSION beyond {max_regression:g}%: {names}")
        else:
            lines.append(f"no section's p50 grew by more than {max_regression:g}% beyond noise")
        # the paths whose p50 grew beyond the threshold without evidence enough to fail
        unjudged = [c for c in changes if c.unjudged and c.p50_change_pct > max_regression]
        if unjudged:
            named = "; ".join(f"{escaped(c.path)} ({c.unjudged})" for c in unjudged)
            lines.append(f"not judged, too little evidence: {named}")
    return "\n".join(lines)


def _signed_seconds(value: float) -> str:
    return ("+" if value >= 0 else "-") + format_seconds(abs(value))


def as_json(timer: str, changes: Sequence[PathChange], max_regression: float | None) -> object:
    """Return the comparison as plain data (NaN as None) for `--json`."""

    def clean(value: object) -> object:
        return None if isinstance(value, float) and math.isnan(value) else value

    return {
        "timer": timer,
        "max_regression_pct": max_regression,
        "level": LEVEL,
        "resamples": RESAMPLES,
        "regression": any(c.flagged for c in changes),
        "paths": [{k: clean(v) for k, v in asdict(c).items()} for c in changes],
    }
