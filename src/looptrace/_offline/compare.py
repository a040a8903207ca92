"""`looptrace compare`: did a change make training slower? Two sets of snapshot files, per path.

Each window of each rank is one sample. Per path the command compares the mean of the
windows' p50 (as a relative change) and of the windows' share of the main timer's lap (in
percentage points), each with a 95 % bootstrap interval: the windows of each side resampled
with replacement, a fixed seed, so the same files always give the same answer. A path is a
regression beyond PCT when its p50 grew by more than PCT and the interval excludes zero, and
only where there is evidence enough to judge it: at least `min_windows` windows a side and a
change of its time per lap of at least `min_impact` % of the main timer's lap. The paths whose
p50 grew beyond PCT without that evidence are listed with the reason.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from looptrace._base.units import format_seconds
from looptrace._offline.inputs import expand_inputs
from looptrace._offline.reader import SPANS, InputError, JsonLinesFile, Warn, open_inputs
from looptrace._offline.report_data import main_timer
from looptrace._offline.summary import merge_windows
from looptrace._offline.text import escaped
from looptrace._offline.window_records import Window, load_windows
from looptrace._stats.partial import partial_window

RESAMPLES = 1000
LEVEL = 0.95
MIN_WINDOWS = 3  # windows a side before a path can fail the gate
MIN_IMPACT_PCT = 1.0  # of the main timer's lap: a smaller change cannot fail the gate
_SEED = 0


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
    timer = main_timer(merge_windows(base))
    rng = random.Random(_SEED)
    paths = sorted({p for w in (*base, *cand) for p, s in w.stats.items() if s.count})
    lap_s = _mean([s[2] for s in _samples(base, timer, timer)])
    changes = [
        _change(path, timer, base=base, cand=cand, rng=rng, gate=gate, lap_s=lap_s)
        for path in paths
    ]
    changes.sort(key=lambda c: (-_abs_or_zero(c.impact_s), c.path))
    return timer, changes


def _abs_or_zero(value: float) -> float:
    return 0.0 if math.isnan(value) else abs(value)


def _samples(windows: Sequence[Window], path: str, timer: str) -> list[tuple[float, float, float]]:
    """Return `(p50, share of the lap, time per lap)` of each window that ran `path`."""
    samples = []
    for window in windows:
        stats, lap = window.stats.get(path), window.stats.get(timer)
        if stats is None or not stats.count or math.isnan(stats.p50):
            continue
        share = per_lap = math.nan
        if lap is not None and lap.count and lap.total > 0 and not math.isnan(stats.total):
            share = stats.total / lap.total
            per_lap = stats.total / lap.count
        samples.append((stats.p50, share, per_lap))
    return samples


def _mean(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return math.fsum(known) / len(known) if known else math.nan


def _change(
    path: str,
    timer: str,
    *,
    base: Sequence[Window],
    cand: Sequence[Window],
    rng: random.Random,
    gate: Gate,
    lap_s: float,
) -> PathChange:
    before, after = _samples(base, path, timer), _samples(cand, path, timer)
    p50_b, p50_a = [s[0] for s in before], [s[0] for s in after]
    share_b, share_a = [s[1] for s in before], [s[1] for s in after]

    def ratio(b: Sequence[float], a: Sequence[float]) -> float:
        low = _mean(b)
        return 100 * (_mean(a) / low - 1) if low > 0 else math.nan

    def points(b: Sequence[float], a: Sequence[float]) -> float:
        return 100 * (_mean(a) - _mean(b))

    p50_change = ratio(p50_b, p50_a) if before and after else math.nan
    p50_low, p50_high = _interval(p50_b, p50_a, ratio, rng)
    share_low, share_high = _interval(share_b, share_a, points, rng)
    impact = _mean([s[2] for s in after]) - _mean([s[2] for s in before])
    impact_pct = 100 * impact / lap_s if lap_s > 0 else math.nan
    unjudged = gate.why_not(min(len(before), len(after)), impact_pct)
    flagged = (
        gate.max_regression is not None
        and not unjudged
        and not math.isnan(p50_change)
        and p50_change > gate.max_regression
        and p50_low > 0
    )
    return PathChange(
        path=path,
        base_p50=_mean(p50_b),
        cand_p50=_mean(p50_a),
        p50_change_pct=p50_change,
        p50_low_pct=p50_low,
        p50_high_pct=p50_high,
        base_share_pct=100 * _mean(share_b),
        cand_share_pct=100 * _mean(share_a),
        share_change_pp=points(share_b, share_a),
        share_low_pp=share_low,
        share_high_pp=share_high,
        impact_s=impact,
        base_windows=len(before),
        cand_windows=len(after),
        flagged=flagged,
        impact_pct=impact_pct,
        unjudged=unjudged,
    )


def _interval(
    before: Sequence[float],
    after: Sequence[float],
    statistic: Callable[[Sequence[float], Sequence[float]], float],
    rng: random.Random,
) -> tuple[float, float]:
    """Return the bootstrap interval of `statistic`; NaN with fewer than 2 windows a side."""
    before = [v for v in before if not math.isnan(v)]
    after = [v for v in after if not math.isnan(v)]
    if len(before) < 2 or len(after) < 2:
        return math.nan, math.nan
    values = sorted(
        statistic(rng.choices(before, k=len(before)), rng.choices(after, k=len(after)))
        for _ in range(RESAMPLES)
    )
    values = [v for v in values if not math.isnan(v)]
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
        f"intervals: {LEVEL:.0%} bootstrap over windows ({RESAMPLES} resamples)"
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
