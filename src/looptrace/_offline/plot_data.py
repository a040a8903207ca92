"""What `looptrace plot` draws, computed from spans or windows (no plotting library needed).

- per step: the time of one timer (default: the outermost one with the most laps) split into
  its `LEGEND` largest child sections, the rest as "other", plus its own remaining time, from
  spans per step, from snapshot or metrics windows as the mean step of each window;
- per section: the duration distribution (every span, or a window's min/p50/p99/max);
- per rank (several ranks): the mean step of the timer split the same way.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from looptrace._offline.palette import LEGEND, OTHER
from looptrace._offline.reader import InputError
from looptrace._offline.report_data import main_timer
from looptrace._offline.summary import Summary
from looptrace._offline.table import tree_paths
from looptrace._offline.text import escaped
from looptrace._offline.window_records import Window
from looptrace._stats.snapshot import SectionStats

if TYPE_CHECKING:
    from looptrace._offline.span_records import SpanRecord

SELF = "(self)"
MAX_SECTIONS = 12
MAX_DOTS = 1500


@dataclass
class PlotData:
    """Everything the figure shows; durations in seconds."""

    timer: str
    per_window: bool
    steps: list[int]
    layers: dict[str, list[float]]
    sections: list[str]
    stats: dict[str, SectionStats]
    samples: dict[str, list[float]] = field(default_factory=dict)
    ranks: dict[int, dict[str, float]] = field(default_factory=dict)
    source: str = ""


def choose_timer(stats: Mapping[str, SectionStats], wanted: str | None) -> tuple[str, list[str]]:
    """Return the timer to split per step (default: the outermost one with the most laps).

    Returns the timer and its direct child sections, largest total first. The most laps, not
    the largest total: a run's one-lap wrapper timer (Lightning's `lightning_fit`) says nothing
    per step.
    """
    order = tree_paths(stats)
    if wanted is not None:
        if wanted not in stats:
            known = ", ".join(escaped(path) for path, _, depth in order if depth == 0)
            raise InputError(f"no section {wanted!r} in the input (outermost: {known})")
        timer = wanted
    else:
        timer = main_timer(dict(stats))
    children = [path for path, parent, _ in order if parent == timer]
    return timer, children


def _sections(stats: Mapping[str, SectionStats]) -> list[str]:
    """Return up to `MAX_SECTIONS` paths with the largest totals (none of 0 s), in tree order."""
    timed = [path for path in stats if stats[path].total > 0]  # a NaN total is no time either
    biggest = set(sorted(timed, key=lambda p: -stats[p].total)[:MAX_SECTIONS])
    return [path for path, _, _ in tree_paths(stats) if path in biggest]


def from_spans(spans: Sequence[SpanRecord], summary: Summary, timer: str | None) -> PlotData:
    """Return the plot data of span records (already filtered by rank and step)."""
    chosen, children = choose_timer(summary.combined, timer)
    wanted = {chosen, *children}
    per_step: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    ranks_of_step: dict[int, set[int]] = defaultdict(set)
    rank_sums: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    rank_steps: dict[int, set[int]] = defaultdict(set)
    samples: dict[str, list[float]] = defaultdict(list)
    for span in spans:
        seconds = span.duration_ns / 1e9
        samples[span.path].append(seconds)
        if span.path in wanted and span.step is not None:
            per_step[span.step][span.path] += seconds
            rank_sums[span.rank][span.path] += seconds
            if span.path == chosen:
                ranks_of_step[span.step].add(span.rank)
                rank_steps[span.rank].add(span.step)
    steps = sorted(s for s in per_step if ranks_of_step[s])
    layers = _layers(
        [per_step[s] for s in steps], [len(ranks_of_step[s]) for s in steps], chosen, children
    )
    ranks = {
        rank: _split(sums, len(rank_steps[rank]), chosen, children)
        for rank, sums in sorted(rank_sums.items())
        if rank_steps[rank]
    }
    sections = _sections(summary.combined)
    rng = random.Random(0)
    return PlotData(
        timer=chosen,
        per_window=False,
        steps=steps,
        layers=layers,
        sections=sections,
        stats=summary.combined,
        samples={p: _subsample(samples[p], rng) for p in sections},
        ranks=ranks if len(ranks) > 1 else {},
        source=summary.description,
    )


def from_windows(windows: Sequence[Window], summary: Summary, timer: str | None) -> PlotData:
    """Return the plot data of snapshot or metrics windows (already filtered)."""
    chosen, children = choose_timer(summary.combined, timer)
    by_step: dict[int, list[Window]] = defaultdict(list)
    for index, window in enumerate(windows):
        by_step[window.step if window.step is not None else index].append(window)
    steps, totals, counts = [], [], []
    for step, group in sorted(by_step.items()):
        sums, count = _window_sums(group, chosen, children)
        if count:
            steps.append(step)
            totals.append(sums)
            counts.append(count)
    layers = _layers(totals, counts, chosen, children)
    ranks = {}
    for rank, stats in summary.per_rank.items():
        if chosen in stats and stats[chosen].count:
            sums = {p: stats[p].total for p in (chosen, *children) if p in stats}
            ranks[rank] = _split(sums, stats[chosen].count, chosen, children)
    return PlotData(
        timer=chosen,
        per_window=True,
        steps=steps,
        layers=layers,
        sections=_sections(summary.combined),
        stats=summary.combined,
        ranks=ranks if len(ranks) > 1 else {},
        source=summary.description,
    )


def _window_sums(
    group: Sequence[Window], chosen: str, children: Sequence[str]
) -> tuple[dict[str, float], int]:
    sums: dict[str, float] = defaultdict(float)
    count = 0
    for window in group:
        timer_stats = window.stats.get(chosen)
        if timer_stats is None or not timer_stats.count:
            continue
        count += timer_stats.count
        for path in (chosen, *children):
            stats = window.stats.get(path)
            if stats is not None:
                sums[path] += _total(stats)
    return sums, count


def _total(stats: SectionStats) -> float:
    """Return the total, from the mean when a metrics file logged no total."""
    if not math.isnan(stats.total):
        return stats.total
    return 0.0 if math.isnan(stats.mean) else stats.mean * stats.count


def _split(
    sums: Mapping[str, float], divisor: int, chosen: str, children: Sequence[str]
) -> dict[str, float]:
    """Return the mean time per step of the largest children, "other", and the timer's own rest.

    `children` are largest first; beyond `LEGEND` of them they add up to "other".
    """
    parts = {child: sums.get(child, 0.0) / divisor for child in children[:LEGEND]}
    if len(children) > LEGEND:
        parts[OTHER] = sum(sums.get(child, 0.0) for child in children[LEGEND:]) / divisor
    parts[SELF] = max(0.0, sums.get(chosen, 0.0) / divisor - sum(parts.values()))
    return parts


def _layers(
    sums: Sequence[Mapping[str, float]],
    divisors: Sequence[int],
    chosen: str,
    children: Sequence[str],
) -> dict[str, list[float]]:
    names = [*children[:LEGEND], *([OTHER] if len(children) > LEGEND else []), SELF]
    layers: dict[str, list[float]] = {name: [] for name in names}
    for step_sums, divisor in zip(sums, divisors, strict=True):
        for name, value in _split(step_sums, divisor, chosen, children).items():
            layers[name].append(value)
    return layers


def _subsample(values: list[float], rng: random.Random) -> list[float]:
    return values if len(values) <= MAX_DOTS else rng.sample(values, MAX_DOTS)
