"""What `looptrace report` shows, computed from span, snapshot and metrics files of any ranks.

Statistics come from snapshot (or flat metrics) windows when there are any, since they count
every lap; span files add the laps of traced steps (the step timeline) and each traced step's
spans across ranks (its waterfall). Windows with system figures add them per rank and over
the steps (`system_view.system_series`).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from looptrace._base.attributes import SLOW_LAP
from looptrace._export.extras import needs_files_extra
from looptrace._offline.findings import Recorded, recorded_findings
from looptrace._offline.hangs import read_hangs, verdict
from looptrace._offline.inputs import expand_inputs
from looptrace._offline.palette import LEGEND, OTHER
from looptrace._offline.reader import METRICS, SNAPSHOTS, SPANS, InputError, JsonLinesFile, Warn
from looptrace._offline.report_bounds import MAX_SHARE_BARS
from looptrace._offline.report_waterfalls import waterfalls
from looptrace._offline.summary import Summary, summarize_spans, summarize_windows
from looptrace._offline.system_view import SystemSeries, system_series
from looptrace._offline.table import tree_paths
from looptrace._offline.throughput import job_rates, peak_memory
from looptrace._offline.window_records import Window, load_windows
from looptrace._stats.partial import partial_window
from looptrace._stats.snapshot import SectionStats

if TYPE_CHECKING:
    from looptrace._offline.span_records import SpanRecord

TOP_SECTIONS = LEGEND  # sections with a colour of their own in the shares; the rest is "other"
MAX_HEATMAP_RANKS = 64


@dataclass(frozen=True, slots=True)
class Lap:
    """One lap of the timer on one rank, from its span."""

    step: int
    rank: int
    seconds: float
    slow: float | None  # `looptrace.slow_lap`: the lap was traced for its slowness
    occasional: str  # a section this lap ran that most laps do not (eval, checkpoint), or ""


@dataclass
class ReportData:
    """Everything the page shows; durations in seconds."""

    files: list[str]
    description: str
    timer: str
    stats: dict[str, SectionStats]
    per_rank: dict[int, dict[str, SectionStats]]
    estimated: bool
    windows: int
    laps: dict[int, list[Lap]]  # per rank, by step (empty without span files)
    window_means: dict[int, list[tuple[int, float]]]  # per rank (step, mean lap) of windows
    shares: list[tuple[str, dict[str, float]]]  # per window label: section -> share of the lap
    top: list[str]  # the sections of the shares, largest first
    shares_note: str = ""  # how the share bars group windows or steps ("": one bar each)
    waterfalls: dict[int, list[SpanRecord]] = field(default_factory=dict)
    waterfall_note: str = ""
    wall_s: float = math.nan
    findings: list[Recorded] = field(default_factory=list)  # warnings and worse, worst first
    rates: dict[str, float] = field(default_factory=dict)  # the main timer's units per second
    memory: tuple[str, str] | None = None  # the run's peak memory: (size, which)
    diagnosed: int = 0  # the snapshot windows whose findings were read (0: no snapshot file)
    hang: str | None = None  # the hang lines' verdict across ranks (None: no rank hung)
    run_steps: tuple[int, int] | None = None  # the first and last step the windows hold
    system: SystemSeries | None = None  # the windows' sampled system figures (None: none)

    @property
    def ranks(self) -> list[int]:
        """Return the ranks seen in any file."""
        return sorted(set(self.per_rank) | set(self.laps))

    @property
    def steps(self) -> int:
        """Return the number of laps of the timer on the rank with the most."""
        counts = [s[self.timer].count for s in self.per_rank.values() if self.timer in s]
        return max(counts, default=0)


def load_report(names: Sequence[str], warn: Warn) -> ReportData:
    """Read every input file of any kind and compute what the page shows.

    A file that cannot be read at all is skipped with a warning; a page needs one that can.
    """
    files = expand_inputs(names, warn)
    by_kind: dict[str, list[JsonLinesFile]] = defaultdict(list)
    for name in files:
        try:
            file = JsonLinesFile(name, warn)
        except InputError as error:
            warn(f"{error}; skipped")
            continue
        if file.kind is None:
            warn(f"{name}: empty; skipped")
            continue
        by_kind[file.kind].append(file)
    spans: list[SpanRecord] = []
    if by_kind[SPANS]:
        with needs_files_extra(InputError):
            from looptrace._offline.span_records import load_spans  # noqa: PLC0415
        spans = load_spans(by_kind[SPANS], warn)
    kind = SNAPSHOTS if by_kind[SNAPSHOTS] else METRICS
    if by_kind[SNAPSHOTS] and by_kind[METRICS]:
        ignored = ", ".join(f.name for f in by_kind[METRICS])
        warn(f"{ignored}: metrics files ignored; the snapshot files hold the same windows")
    every = load_windows(kind, by_kind[kind], warn)
    windows = [w for w in every if w.subtree == "root"]
    if not spans and not windows:
        raise InputError(f"no readable records in {', '.join(names)}")
    summary = summarize_windows(windows) if windows else summarize_spans(spans)
    data = _compute([*files], summary, windows, spans, has_windows=bool(windows))
    if kind == SNAPSHOTS:  # what `looptrace summary` prints: every window's recorded diagnosis
        data.findings, data.diagnosed = recorded_findings(every), len(every)
        data.hang = verdict(read_hangs([file.name for file in by_kind[SNAPSHOTS]]))
        data.rates, data.memory = job_rates(every, data.timer), peak_memory(every)
    return data


def main_timer(stats: dict[str, SectionStats]) -> str:
    """Return the outermost timer with the most laps (ties: the larger total)."""
    outermost = [path for path, _, depth in tree_paths(stats) if depth == 0]
    return max(outermost, key=lambda p: (stats[p].count, _finite(stats[p].total)))


def children_of(stats: dict[str, SectionStats], timer: str) -> list[str]:
    """Return the direct child sections of `timer`, largest total first."""
    return [path for path, parent, _ in tree_paths(stats) if parent == timer]


def _compute(
    files: list[str],
    summary: Summary,
    windows: list[Window],
    spans: list[SpanRecord],
    *,
    has_windows: bool,
) -> ReportData:
    stats = summary.combined
    timer = main_timer(stats)
    top = children_of(stats, timer)[:TOP_SECTIONS]
    laps = _laps(spans, timer)
    shares, shares_note = (
        window_shares(windows, timer, top) if windows else _span_shares(spans, timer, top)
    )
    description = summary.description
    if has_windows and spans:
        description += f"; {len(spans)} spans of {len({s.step for s in spans})} traced steps"
    data = ReportData(
        files=files,
        description=description,
        timer=timer,
        stats=stats,
        per_rank=summary.per_rank,
        estimated=summary.estimated,
        windows=len(windows),
        laps=laps,
        window_means=_window_means(windows, timer),
        shares=shares,
        top=top,
        shares_note=shares_note,
    )
    data.waterfalls, data.waterfall_note = waterfalls(spans, laps)
    data.run_steps = _run_steps(windows)
    data.system = system_series(windows)
    data.wall_s = _wall(windows, spans, summary, timer)
    return data


def _finite(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _laps(spans: Sequence[SpanRecord], timer: str) -> dict[int, list[Lap]]:
    """Return the laps of `timer` per rank, each marked slow or occasional."""
    children: dict[tuple[int, int], set[str]] = defaultdict(set)
    prefix = timer + "."
    for span in spans:
        if span.step is not None and span.path.startswith(prefix):
            children[span.rank, span.step].add(span.path[len(prefix) :].split(".")[0])
    seen = Counter(name for names in children.values() for name in names)
    common = {name for name, n in seen.items() if n > len(children) / 2}
    laps: dict[int, list[Lap]] = defaultdict(list)
    for span in spans:
        if span.path != timer or span.step is None:
            continue
        slow = span.attributes.get(SLOW_LAP)
        rare = sorted(children[span.rank, span.step] - common)
        laps[span.rank].append(
            Lap(
                step=span.step,
                rank=span.rank,
                seconds=span.duration_ns / 1e9,
                slow=float(slow) if isinstance(slow, int | float) else None,
                occasional=", ".join(rare),
            )
        )
    return {rank: sorted(found, key=lambda lap: lap.step) for rank, found in sorted(laps.items())}


def _run_steps(windows: Sequence[Window]) -> tuple[int, int] | None:
    """Return the first and last step any window holds time of (None: no window says)."""
    held = [window.steps for window in windows if window.steps is not None]
    if not held:
        return None
    return min(first for first, _ in held), max(last for _, last in held)


def _window_means(windows: Sequence[Window], timer: str) -> dict[int, list[tuple[int, float]]]:
    means: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for index, window in enumerate(windows):
        stats = window.stats.get(timer)
        if stats is not None and stats.count and not math.isnan(stats.mean):
            means[window.rank].append((index if window.step is None else window.step, stats.mean))
    return {rank: sorted(points) for rank, points in sorted(means.items())}


def _shares(sums: dict[str, float], timer: str, top: Sequence[str]) -> dict[str, float]:
    whole = sums.get(timer, 0.0)
    if whole <= 0:
        return {}
    shares = {name: sums.get(name, 0.0) / whole for name in top}
    shares[OTHER] = max(0.0, 1.0 - sum(shares.values()))
    return shares


def window_shares(
    windows: Sequence[Window], timer: str, top: Sequence[str]
) -> tuple[list[tuple[str, dict[str, float]]], str]:
    """Return each window's share of the lap per top section, summed over ranks, and a note.

    A partial window (no whole lap: the tail of one after the last reset) has no share. Past
    `MAX_SHARE_BARS` steps at which windows closed, a bar sums those of consecutive steps.
    """
    groups: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for index, window in enumerate(windows):
        if partial_window(window.stats):
            continue
        key = index if window.step is None else window.step
        for path in (timer, *top):
            stats = window.stats.get(path)
            if stats is not None and not math.isnan(stats.total):
                groups[key][path] += stats.total
    if len(groups) <= MAX_SHARE_BARS:
        return [
            (f"window at step {key}", _shares(sums, timer, top))
            for key, sums in sorted(groups.items())
        ], ""
    bars = _grouped(groups, timer, top, "windows at steps")
    note = (
        f"Each bar sums the windows of {math.ceil(len(groups) / MAX_SHARE_BARS)} consecutive "
        f"steps: {len(bars)} bars for the {len(groups):,} steps at which windows closed."
    )
    return bars, note


def _grouped(
    per_step: dict[int, dict[str, float]], timer: str, top: Sequence[str], what: str
) -> list[tuple[str, dict[str, float]]]:
    """Return at most `MAX_SHARE_BARS` bars, each the shares of consecutive steps' sums."""
    steps = sorted(per_step)
    size = math.ceil(len(steps) / MAX_SHARE_BARS)
    result = []
    for start in range(0, len(steps), size):
        group = steps[start : start + size]
        sums: dict[str, float] = defaultdict(float)
        for step in group:
            for path, seconds in per_step[step].items():
                sums[path] += seconds
        result.append((f"{what} {group[0]}-{group[-1]}", _shares(sums, timer, top)))
    return result


def _span_shares(
    spans: Sequence[SpanRecord], timer: str, top: Sequence[str]
) -> tuple[list[tuple[str, dict[str, float]]], str]:
    """Without windows: the shares of groups of consecutive traced steps, and a note."""
    wanted = {timer, *top}
    per_step: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for span in spans:
        if span.step is not None and span.path in wanted:
            per_step[span.step][span.path] += span.duration_ns / 1e9
    if not per_step:
        return [], ""
    bars = _grouped(per_step, timer, top, "steps")
    size = math.ceil(len(per_step) / MAX_SHARE_BARS)
    note = (
        f"Each bar sums {size} consecutive traced steps: {len(bars)} bars for the "
        f"{len(per_step):,} traced steps."
        if size > 1
        else ""
    )
    return bars, note


def _wall(
    windows: Sequence[Window], spans: Sequence[SpanRecord], summary: Summary, timer: str
) -> float:
    """Return the run's wall time: the longest rank's windows, else its spans or laps.

    Windows cover the whole run; spans only the steps that were traced (the first ones,
    every Nth and the slow ones), so they are read only where no window says it.
    """
    by_rank: dict[int, float] = defaultdict(float)
    for window in windows:
        by_rank[window.rank] += window.seconds
    if by_rank and max(by_rank.values()) > 0:
        return max(by_rank.values())
    if spans:
        return (max(s.end_ns for s in spans) - min(s.start_ns for s in spans)) / 1e9
    totals = [s[timer].total for s in summary.per_rank.values() if timer in s]
    return max((t for t in totals if not math.isnan(t)), default=math.nan)


def excess_over_median(data: ReportData, sections: Sequence[str]) -> dict[int, dict[str, float]]:
    """Return per rank and section the mean time per lap minus the median rank's."""
    per_lap: dict[str, dict[int, float]] = defaultdict(dict)
    for rank, stats in data.per_rank.items():
        laps = stats[data.timer].count if data.timer in stats else 0
        for path in sections:
            if laps and path in stats and not math.isnan(stats[path].total):
                per_lap[path][rank] = stats[path].total / laps
    excess: dict[int, dict[str, float]] = defaultdict(dict)
    for path, values in per_lap.items():
        middle = statistics.median(values.values())
        for rank, value in values.items():
            excess[rank][path] = value - middle
    return dict(excess)
