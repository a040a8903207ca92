"""The waterfalls `looptrace report` carries: which traced steps, ranks and spans, within bounds.

A waterfall shows one traced step's spans across ranks. The page carries at most
`MAX_WATERFALLS` of them and `MAX_WATERFALL_SPANS` spans in all: the steps with a slow or
occasional lap first (the slowest first), then the slowest others, then others spread evenly
over the run, as long as their spans fit. Each waterfall keeps the `MAX_WATERFALL_RANKS`
ranks slowest in its step and at most `MAX_STEP_SPANS` spans, its longest.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from looptrace._offline.report_bounds import MAX_STEP_SPANS, MAX_WATERFALL_SPANS, spread_order

if TYPE_CHECKING:
    from looptrace._offline.report_data import Lap
    from looptrace._offline.span_records import SpanRecord

MAX_WATERFALLS = 300  # traced steps whose waterfall the page carries
MAX_WATERFALL_RANKS = 16  # ranks of one waterfall (the slowest in that step)


def waterfalls(
    spans: Sequence[SpanRecord], laps: dict[int, list[Lap]]
) -> tuple[dict[int, list[SpanRecord]], str]:
    """Return the spans of the traced steps the page carries a waterfall of, and a note."""
    by_step: dict[int, list[SpanRecord]] = defaultdict(list)
    for span in spans:
        if span.step is not None:
            by_step[span.step].append(span)
    if not by_step:
        return {}, ""
    lap_of = {(lap.step, lap.rank): lap.seconds for found in laps.values() for lap in found}
    chosen: dict[int, list[SpanRecord]] = {}
    cut_ranks = cut_spans = False
    room = MAX_WATERFALL_SPANS
    for step in _priority(_chosen_steps(sorted(by_step), laps), laps):
        group = by_step[step]
        ranks = {span.rank for span in group}
        fewer_ranks = len(ranks) > MAX_WATERFALL_RANKS
        if fewer_ranks:
            slowest = set(
                sorted(ranks, key=lambda r: -lap_of.get((step, r), 0.0))[:MAX_WATERFALL_RANKS]
            )
            group = [span for span in group if span.rank in slowest]
        fewer_spans = len(group) > MAX_STEP_SPANS
        if fewer_spans:
            longest = sorted(group, key=lambda s: (-s.duration_ns, s.rank, s.start_ns))
            kept = {id(span) for span in longest[:MAX_STEP_SPANS]}
            group = [span for span in group if id(span) in kept]
        if len(group) <= room:
            room -= len(group)
            chosen[step] = group
            cut_ranks, cut_spans = cut_ranks or fewer_ranks, cut_spans or fewer_spans
    notes = []
    if len(chosen) < len(by_step):
        shown = MAX_WATERFALL_SPANS - room
        total = sum(len(group) for group in by_step.values())
        notes.append(
            f"waterfalls of {len(chosen):,} of {len(by_step):,} traced steps ({shown:,} of "
            f"{total:,} spans): the steps with a slow or occasional lap first, then the "
            "slowest laps, then evenly spaced others"
        )
    if cut_ranks:
        notes.append(f"each waterfall shows the {MAX_WATERFALL_RANKS} ranks slowest in that step")
    if cut_spans:
        notes.append(
            f"a step of more than {MAX_STEP_SPANS:,} spans shows its {MAX_STEP_SPANS:,} longest"
        )
    return dict(sorted(chosen.items())), "; ".join(notes)


def _worst(laps: dict[int, list[Lap]]) -> tuple[dict[int, float], set[int]]:
    """Return each step's slowest lap over ranks, and the steps with a slow or occasional lap."""
    worst: dict[int, float] = defaultdict(float)
    marked: set[int] = set()
    for rank_laps in laps.values():
        for lap in rank_laps:
            worst[lap.step] = max(worst[lap.step], lap.seconds)
            if lap.slow is not None or lap.occasional:
                marked.add(lap.step)
    return worst, marked


def _chosen_steps(steps: list[int], laps: dict[int, list[Lap]]) -> set[int]:
    """Return at most `MAX_WATERFALLS` steps: the marked, the slowest and evenly spaced ones."""
    if len(steps) <= MAX_WATERFALLS:
        return set(steps)
    worst, marked = _worst(laps)
    keep = set(sorted(marked, key=lambda s: -worst[s])[: MAX_WATERFALLS // 3])
    keep |= set(sorted(worst, key=lambda s: -worst[s])[: MAX_WATERFALLS // 3])
    stride = max(1, len(steps) // (MAX_WATERFALLS - len(keep)))
    keep |= set(steps[::stride][: MAX_WATERFALLS - len(keep)])
    return keep


def _priority(steps: set[int], laps: dict[int, list[Lap]]) -> list[int]:
    """Return `steps` in the order the span budget takes them: marked, slowest, spread."""
    worst, marked = _worst(laps)
    first = sorted(steps & marked, key=lambda s: (-worst[s], s))
    rest = sorted(steps - marked, key=lambda s: (-worst[s], s))
    then = rest[: MAX_WATERFALLS // 3]
    return [*first, *then, *spread_order(sorted(rest[MAX_WATERFALLS // 3 :]))]
