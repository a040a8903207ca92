"""`looptrace summary`: per-path statistics of span or snapshot files, as a tree table.

From span files every statistic is exact (computed from the durations themselves). From
snapshot or flat metrics files, windows are merged: totals and self time over every window
(a section still running when a window closed puts its time so far there), counts, mean, min,
max, standard deviation and buckets over the intervals that ended, each whole, exactly;
quantiles of several windows are estimated from each window's min, p50, p90, p99 and max
(exact for one window). Windows with system figures add their block under the table
(`system_view.system_block`).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from looptrace._base.units import format_seconds
from looptrace._offline.mixture import mixture_quantiles
from looptrace._offline.reader import InputError
from looptrace._offline.system_view import SystemFold, figures_block
from looptrace._offline.table import render_table
from looptrace._offline.text import escaped
from looptrace._offline.throughput import JobRateFold, MemoryFold, ThroughputFold
from looptrace._offline.window_records import Window
from looptrace._stats.buckets import BOUNDARIES_S
from looptrace._stats.sketch import nearest_rank
from looptrace._stats.snapshot import SectionStats

if TYPE_CHECKING:
    from looptrace._offline.span_records import SpanRecord

_QUANTILES = (0.5, 0.9, 0.99)
LISTED_RANKS = 16  # ranks (past it, runs of ranks) the description names; the rest are counted
RANK_NOTE = "rank min / rank max: lowest and highest per-rank mean; slowest: the rank of the max"
SPREAD_NOTE = (
    "rank min / rank max: lowest and highest per-rank mean in any window, from "
    "reset(across_ranks=True); slowest: the rank of the max in most windows"
)
ESTIMATE_NOTE = (
    "p50 and p99 of several windows are estimated from each window's min, p50, p90, p99 and max"
)


@dataclass(frozen=True)
class Summary:
    """Statistics per path over every selected rank, and per rank."""

    combined: dict[str, SectionStats]
    per_rank: dict[int, dict[str, SectionStats]]
    description: str
    estimated: bool = False
    # From `reset(across_ranks=True)` lines: path -> (rank min, rank max, slowest rank).
    spread: dict[str, tuple[float, float, int]] | None = None
    # Throughput and memory lines (`throughput.py`), printed under the table.
    counted: tuple[str, ...] = ()
    # The system figures' block (`system_view.py`), printed under those.
    system: tuple[str, ...] = ()


class _Record(Protocol):
    @property
    def rank(self) -> int: ...

    @property
    def step(self) -> int | None: ...


RecordT = TypeVar("RecordT", bound=_Record)


def select(
    records: Sequence[RecordT], ranks: Sequence[int] | None, since_step: int | None
) -> list[RecordT]:
    """Return the records of `ranks` (all if None) from step `since_step` on.

    Raises:
        InputError: a wanted rank is not in `records`, or nothing is left.

    """
    present = {record.rank for record in records}
    missing = sorted(set(ranks or ()) - present)
    if missing:
        have = ", ".join(str(r) for r in sorted(present))
        raise InputError(f"no rank {', '.join(map(str, missing))} in the input (ranks: {have})")
    keep = set(ranks) if ranks else present
    chosen = [
        record
        for record in records
        if record.rank in keep
        and (since_step is None or (record.step is not None and record.step >= since_step))
    ]
    if not chosen:
        raise InputError(f"nothing at step {since_step} or later")
    return chosen


def summarize_spans(spans: Sequence[SpanRecord]) -> Summary:
    """Return exact statistics of spans, over all of them and per rank."""
    # By rank: another rank's lap names rank 0's lap of the step as its (remote) parent, but
    # it runs beside it, not inside it.
    children_ns: dict[tuple[int, str], int] = defaultdict(int)
    for span in spans:
        if span.parent_id:
            children_ns[span.rank, span.parent_id] += span.duration_ns
    per_rank: dict[int, dict[str, list[SpanRecord]]] = defaultdict(lambda: defaultdict(list))
    everything: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in spans:
        per_rank[span.rank][span.path].append(span)
        everything[span.path].append(span)
    steps = [s.step for s in spans if s.step is not None]
    traced = len(set(steps))
    description = f"{_count(len(spans), 'span')}"
    description += f" of {_count(traced, 'traced step')}" if traced else ""
    description += f", {_ranks_text(per_rank)}" + _steps_text(steps, "step")
    return Summary(
        combined={p: _from_spans(group, children_ns) for p, group in everything.items()},
        per_rank={
            rank: {p: _from_spans(group, children_ns) for p, group in paths.items()}
            for rank, paths in sorted(per_rank.items())
        },
        description=description,
    )


def summarize_windows(windows: Sequence[Window]) -> Summary:
    """Return the merged statistics of snapshot or metrics windows, overall and per rank."""
    per_rank: dict[int, list[Window]] = defaultdict(list)
    facts = WindowFacts()
    for window in windows:
        per_rank[window.rank].append(window)
        facts.add(window)
    return facts.summary(
        merge_windows(windows),
        {rank: merge_windows(group) for rank, group in sorted(per_rank.items())},
    )


class WindowFacts:
    """What a summary of windows says besides its table, folded window by window.

    The description (windows, timers, ranks, steps), the cross-rank spread of one rank's
    `reset(across_ranks=True)` lines, the throughput and memory lines and the system
    figures: memory grows with the paths, units, figures and ranks, not with the windows.
    """

    def __init__(self) -> None:
        """Hold no window yet."""
        self.windows = 0
        self.ranks: set[int] = set()
        self.subtrees: Counter[str] = Counter()
        self.held: tuple[int, int] | None = None  # the least and largest step of `steps`
        self.closed: tuple[int, int] | None = None  # the least and largest `step`
        self.lows: dict[str, float] = {}  # the spread's least per-rank mean, by path
        self.highs: dict[str, float] = {}
        self.votes: dict[str, Counter[int]] = defaultdict(Counter)  # slowest rank, by path
        self.throughput = ThroughputFold()
        self.job_rates = JobRateFold()
        self.memory = MemoryFold()
        self.system = SystemFold()

    def add(self, window: Window) -> None:
        """Add one window (its statistics go to the table, apart: `merge_windows`)."""
        self.windows += 1
        self.ranks.add(window.rank)
        self.subtrees[window.subtree] += 1
        if window.steps is not None:
            self.held = _widened(self.held, *window.steps)
        if window.step is not None:
            self.closed = _widened(self.closed, window.step, window.step)
        for path, spread in (window.spread or {}).items():
            mean = spread.get("mean") or {}
            low, high, slowest = mean.get("min"), mean.get("max"), mean.get("slowest_rank")
            if low is None or high is None or slowest is None:
                continue
            self.lows[path] = min(self.lows.get(path, math.inf), float(low))
            self.highs[path] = max(self.highs.get(path, -math.inf), float(high))
            self.votes[path][int(slowest)] += 1
        self.throughput.add(window)
        self.job_rates.add(window)
        self.memory.add(window)
        self.system.add(window)

    def summary(
        self, combined: dict[str, SectionStats], per_rank: dict[int, dict[str, SectionStats]]
    ) -> Summary:
        """Return the summary of the windows added, with their merged statistics."""
        description = f"{_count(self.windows, 'window')}{_subtrees_text(self.subtrees)}, "
        description += _ranks_text(self.ranks)
        if self.held is not None:
            description += _steps_text(self.held, "step")
        elif self.closed is not None:
            description += _steps_text(self.closed, "closed at step")
        return Summary(
            combined=combined,
            per_rank=per_rank,
            description=description,
            estimated=self.windows > 1,
            spread=self._spread() if len(self.ranks) == 1 else None,
            counted=(
                *self.throughput.lines(),
                *self.job_rates.lines(),
                *filter(None, [self.memory.line()]),
            ),
            system=tuple(figures_block(self.system.figures())),
        )

    def _spread(self) -> dict[str, tuple[float, float, int]] | None:
        """Combine the cross-rank spread of the per-rank mean over the windows with one."""
        if not self.votes:
            return None
        return {
            path: (self.lows[path], self.highs[path], min(v, key=lambda r: (-v[r], r)))
            for path, v in self.votes.items()
        }


def _widened(span: tuple[int, int] | None, low: int, high: int) -> tuple[int, int]:
    return (low, high) if span is None else (min(span[0], low), max(span[1], high))


def render_summary(summary: Summary) -> str:
    """Return the description line, the tree table and the notes that apply."""
    extra: list[tuple[str, Mapping[str, str]]] = []
    notes = []
    if len(summary.per_rank) > 1:
        lows, highs, slowest = {}, {}, {}
        for path in summary.combined:
            means = {
                rank: stats[path].mean
                for rank, stats in summary.per_rank.items()
                if path in stats and not math.isnan(stats[path].mean)
            }
            if not means:
                continue
            worst = max(means, key=lambda rank: (means[rank], -rank))
            lows[path] = format_seconds(min(means.values()))
            highs[path] = format_seconds(means[worst])
            slowest[path] = str(worst)
        extra = [("rank min", lows), ("rank max", highs), ("slowest", slowest)]
        notes.append(RANK_NOTE)
    elif summary.spread is not None:
        spread = summary.spread
        extra = [
            ("rank min", {p: format_seconds(low) for p, (low, _, _) in spread.items()}),
            ("rank max", {p: format_seconds(high) for p, (_, high, _) in spread.items()}),
            ("slowest", {p: str(rank) for p, (_, _, rank) in spread.items()}),
        ]
        notes.append(SPREAD_NOTE)
    if summary.estimated:
        notes.append(ESTIMATE_NOTE)
    parts = [summary.description, "", render_table(summary.combined, extra)]
    if summary.counted:
        parts += ["", *summary.counted]
    if summary.system:
        parts += ["", *summary.system]
    if notes:
        parts += ["", *notes]
    return "\n".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _subtrees_text(subtrees: Counter[str]) -> str:
    """Name the timers whose windows these are, when some are of one timer's subtree."""
    if set(subtrees) <= {"root"}:
        return ""
    return f" ({', '.join(f'{n} of {escaped(path)}' for path, n in sorted(subtrees.items()))})"


def _steps_text(steps: Sequence[int], what: str) -> str:
    if not steps:
        return ""
    low, high = min(steps), max(steps)
    return f", {what} {low}" if low == high else f", {what}s {low}-{high}"


def _ranks_text(per_rank: Iterable[int]) -> str:
    """Return "3 ranks (0, 1, 2)"; past `LISTED_RANKS`, runs of ranks: "1,024 ranks (0-1023)"."""
    ranks = sorted(per_rank)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) <= LISTED_RANKS:
        return f"{len(ranks)} ranks ({', '.join(str(r) for r in ranks)})"
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    shown = [str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]
    more = ", …" if len(shown) > LISTED_RANKS else ""
    return f"{len(ranks):,} ranks ({', '.join(shown[:LISTED_RANKS])}{more})"


def _from_spans(
    spans: Sequence[SpanRecord], children_ns: Mapping[tuple[int, str], int]
) -> SectionStats:
    durations = sorted(s.duration_ns / 1e9 for s in spans)
    count = len(durations)
    total = math.fsum(durations)
    mean = total / count
    buckets = [0] * (len(BOUNDARIES_S) + 1)
    for value in durations:
        buckets[bisect.bisect_left(BOUNDARIES_S, value)] += 1
    self_ns = sum(max(0, s.duration_ns - children_ns.get((s.rank, s.span_id), 0)) for s in spans)
    p50, p90, p99 = (_quantile(durations, q) for q in _QUANTILES)
    return SectionStats(
        count=count,
        total=total,
        mean=mean,
        min=durations[0],
        max=durations[-1],
        std=math.sqrt(math.fsum((d - mean) ** 2 for d in durations) / count),
        p50=p50,
        p90=p90,
        p99=p99,
        self_time=self_ns / 1e9,
        errors=sum(s.error for s in spans),
        buckets=tuple(buckets),
    )


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Return the q-quantile of sorted values as snapshots define it: by nearest rank.

    The ceil(q * n)-th smallest value, as a snapshot's exact quantiles are (its sketch's
    within 1 %), so a summary of span files agrees with the snapshots of the same run.
    """
    return ordered[nearest_rank(q, len(ordered))]


def merge_windows(windows: Sequence[Window]) -> dict[str, SectionStats]:
    """Return per-path statistics over several windows (see the module docstring)."""
    groups: dict[str, list[SectionStats]] = defaultdict(list)
    for window in windows:
        for path, stats in window.stats.items():
            groups[path].append(stats)
    return {path: merge_path(parts) for path, parts in sorted(groups.items())}


def merge_path(parts: Sequence[SectionStats]) -> SectionStats:
    """Merge one path's windows, those where no interval of it ended included.

    A window's `total` and `self_time` hold the time the path ran in it, also the part of an
    interval cut by the window's end; its `count`, `mean`, `min`, `max`, quantiles and
    buckets describe the intervals that ended in it, whole. So times add up over every window
    and the rest merges over the windows that counted an interval.
    """
    if len(parts) == 1:
        return parts[0]
    total = _sum_known(p.total for p in parts)
    self_time = _sum_known(p.self_time for p in parts)
    errors = sum(p.errors for p in parts)
    ended = [p for p in parts if p.count > 0]
    if len(ended) == 1:
        return dataclasses.replace(ended[0], total=total, self_time=self_time, errors=errors)
    count = sum(p.count for p in ended)
    if count == 0:
        return SectionStats.empty(
            total=total, self_time=self_time, errors=errors, buckets=_sum_buckets(parts)
        )
    mean = math.fsum(p.count * p.mean for p in ended) / count
    square = math.fsum(p.count * (p.std**2 + p.mean**2) for p in ended) / count
    p50, p90, p99 = mixture_quantiles(ended, _QUANTILES)
    return SectionStats(
        count=count,
        total=total,
        mean=mean,
        min=min(p.min for p in ended),
        max=max(p.max for p in ended),
        std=math.sqrt(max(0.0, square - mean**2)),
        p50=p50,
        p90=p90,
        p99=p99,
        self_time=self_time,
        errors=errors,
        buckets=_sum_buckets(ended),
    )


def _sum_known(values: Iterable[float]) -> float:
    """Return the exact sum of the defined values (NaN if none is: a metrics file without it)."""
    known = [value for value in values if not math.isnan(value)]
    return math.fsum(known) if known else math.nan


def _sum_buckets(parts: Sequence[SectionStats]) -> tuple[int, ...]:
    """Return the bucket counts of windows added up; () when their boundaries differ."""
    lengths = {len(p.buckets) for p in parts}
    if len(lengths) != 1:
        return ()
    return tuple(sum(column) for column in zip(*(p.buckets for p in parts), strict=True))
