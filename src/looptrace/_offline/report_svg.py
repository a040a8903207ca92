"""The charts of `looptrace report`, drawn as inline SVG (no charting library, no script needed).

This module computes each chart's geometry; its markup is a template of `templates/` (`*.svg.j2`),
which escapes every text it prints (`report_jinja`). Every mark carries a `<title>` with its
exact values (the browser shows it on hover); the page's small script adds the step crosshair,
the click that opens a waterfall and sorting.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from markupsafe import Markup

from looptrace._base.units import format_seconds
from looptrace._offline import palette
from looptrace._offline.palette import OTHER, OTHER_COLOUR, TIMER_COLOUR
from looptrace._offline.report_bounds import (
    EXTREME_RANKS,
    MAX_MARKS,
    MAX_TIMELINE_RANKS,
    Kept,
    extremes_first,
    thinned,
)
from looptrace._offline.report_data import Lap, ReportData
from looptrace._offline.report_jinja import render

if TYPE_CHECKING:
    from looptrace._offline.span_records import SpanRecord

RANK_PALETTE = (
    "#1f77b4",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)
SLOW_COLOUR = "#d62728"
OCCASIONAL_COLOUR = "#ff7f0e"
MAX_POINTS = 20_000  # timeline points drawn; beyond, min and max per bucket of steps
WIDTH = 1000
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 12, 28


def colours(sections: Sequence[str]) -> dict[str, str]:
    """Return one colour per section path: the shared palette's (plot and watch use it too)."""
    return palette.colours(sections)


def short(path: str, timer: str) -> str:
    """Return a path relative to the timer (`forward.encoder`), or the path itself."""
    return path[len(timer) + 1 :] if path.startswith(timer + ".") else path


def px(value: float) -> str:
    """Return a coordinate as the charts write it: one decimal."""
    return f"{value:.1f}"


class _LogAxis:
    """A logarithmic y axis over positive seconds."""

    def __init__(self, values: Sequence[float], height: float) -> None:
        positive = [v for v in values if v > 0] or [1e-3]
        self.low = 10 ** math.floor(math.log10(min(positive)))
        self.high = 10 ** math.ceil(math.log10(max(positive)))
        if self.high <= self.low:
            self.high = self.low * 10
        self.height = height

    def y(self, seconds: float) -> float:
        value = max(seconds, self.low)
        share = math.log10(value / self.low) / math.log10(self.high / self.low)
        return TOP + (1 - share) * self.height

    def ticks(self) -> list[float]:
        ticks, tick = [], self.low
        while tick <= self.high * 1.0001:
            ticks.append(tick)
            tick *= 10
        return ticks


class Tick(NamedTuple):
    """A y-axis line at `y` with its label."""

    y: str
    label: str


class Line(NamedTuple):
    """A rank's polyline through `points` ("x,y x,y"), or a dot at `points` where `dot`."""

    dot: bool
    points: str
    x: str
    y: str
    colour: str
    title: str


class _Mark(NamedTuple):
    """A slow or occasional lap on the timeline: a circle that opens the step's waterfall."""

    kind: str
    step: int
    rank: int
    x: str
    y: str
    colour: str
    label: str


def timeline(data: ReportData) -> tuple[Markup, dict[str, object], str]:
    """Return the step timeline SVG, the points the hover reads, and what it left out ("").

    Without span files it draws each window's mean lap per rank instead. The axis covers the
    run's steps (the windows'), not only the traced ones; points farther apart than twice the
    usual distance between them (steps not traced) are not joined.
    """
    height = 240
    inner_h = height - TOP - BOTTOM
    inner_w = WIDTH - LEFT - RIGHT
    series: dict[int, list[tuple[int, float]]]
    notes = []
    every: dict[int, list[tuple[int, float]]]
    if data.laps:
        every = {
            rank: [(lap.step, lap.seconds) for lap in found] for rank, found in data.laps.items()
        }
        what = "laps"
    else:
        every, what = dict(data.window_means), "window means"
    kept = _drawn_ranks(every)
    total = sum(len(every[rank]) for rank in kept.keys)
    budget = max(2, MAX_POINTS // max(1, len(kept.keys)))
    series = {rank: thinned(every[rank], budget) for rank in kept.keys}
    drawn = sum(len(points) for points in series.values())
    if drawn < total:
        notes.append(
            f"The timeline is down-sampled: {drawn:,} of {total:,} {what} drawn, the "
            "shortest and longest of each bucket of steps, so slow steps stay visible."
        )
    if kept.note:
        notes.append(f"Ranks drawn: {kept.note}.")
    values = [s for points in series.values() for _, s in points]
    steps = [step for points in series.values() for step, _ in points]
    if not values:
        return render("no_laps.html.j2"), {}, " ".join(notes)
    first, last = min(steps), max(steps)
    if data.run_steps is not None:
        first, last = min(first, data.run_steps[0]), max(last, data.run_steps[1])
    span = max(1, last - first)
    axis = _LogAxis(values, inner_h)

    def x(step: float) -> float:
        return LEFT + (step - first) / span * inner_w

    lines = [
        rank_line([(x(step), axis.y(s)) for step, s in segment], colour, f"rank {rank}")
        for index, (rank, points) in enumerate(series.items())
        for colour in [RANK_PALETTE[index % len(RANK_PALETTE)]]
        for segment in segments(points)
    ]
    marks = []
    chosen, marks_note = _marked(data.laps)
    for lap in chosen:
        kind = "slow" if lap.slow is not None else "occasional"
        what = f"slow lap ({lap.slow:.1f}x the median)" if lap.slow is not None else lap.occasional
        label = f"step {lap.step}, rank {lap.rank}: {format_seconds(lap.seconds)}, {what}"
        colour = SLOW_COLOUR if kind == "slow" else OCCASIONAL_COLOUR
        x_at, y_at = px(x(lap.step)), px(axis.y(lap.seconds))
        marks.append(_Mark(kind, lap.step, lap.rank, x_at, y_at, colour, label))
    if marks_note:
        notes.append(marks_note)
    svg = render(
        "timeline.svg.j2",
        width=WIDTH, height=height, first=first, last=last, left=LEFT, right=WIDTH - RIGHT,
        top=TOP, inner_w=inner_w, inner_h=inner_h,
        y_ticks=[Tick(px(axis.y(t)), format_seconds(t)) for t in axis.ticks()],
        x_ticks=[(px(x(step)), step) for step in step_ticks(first, last)],
        lines=lines, marks=marks,
    )  # fmt: skip
    hover: dict[str, object] = {
        "ranks": list(series),
        "points": {
            str(rank): [(step, float(f"{s:.4g}")) for step, s in points]
            for rank, points in series.items()
        },
    }
    return svg, hover, " ".join(notes)


def _drawn_ranks(points: Mapping[int, Sequence[tuple[int, float]]]) -> Kept[int]:
    """Return the ranks the timeline draws: all, or the first and those of extreme mean lap."""
    means = {
        rank: math.fsum(s for _, s in found) / len(found) if found else math.nan
        for rank, found in points.items()
    }
    return extremes_first(
        means, MAX_TIMELINE_RANKS, EXTREME_RANKS, lambda rank: f"rank {rank}", "mean lap"
    )


def _marked(laps: Mapping[int, Sequence[Lap]]) -> tuple[list[Lap], str]:
    """Return the slow and occasional laps the timeline marks, on every rank, and a note.

    Past `MAX_MARKS`, the slow laps first (the most times their median first), then the
    longest of the occasional ones; in the order of ranks and steps.
    """
    found = [
        lap
        for rank_laps in laps.values()
        for lap in rank_laps
        if lap.slow is not None or lap.occasional
    ]
    if len(found) <= MAX_MARKS:
        return found, ""
    ranked = sorted(
        range(len(found)),
        key=lambda i: (found[i].slow is None, -(found[i].slow or 0.0), -found[i].seconds, i),
    )
    kept = sorted(ranked[:MAX_MARKS])
    note = (
        f"{MAX_MARKS:,} of {len(found):,} slow and occasional laps are marked: the slow laps "
        "first, those most times their median first, then the longest occasional ones."
    )
    return [found[i] for i in kept], note


def rank_line(points: Sequence[tuple[float, float]], colour: str, title: str) -> Line:
    """Return a polyline through `points` (x, y), or a dot where there is one point only."""
    if len(points) == 1:  # a traced step with no neighbour near it
        x, y = points[0]
        return Line(True, "", px(x), px(y), colour, title)
    path = " ".join(f"{px(x)},{px(y)}" for x, y in points)
    return Line(False, path, "", "", colour, title)


def segments(points: Sequence[tuple[int, float]]) -> list[list[tuple[int, float]]]:
    """Split a rank's (step, seconds) points where steps are missing, for separate lines.

    Consecutive points farther apart than twice the median distance between them (the
    sampling's stride) belong to different segments: the steps between were not traced.
    """
    if len(points) < 2:
        return [list(points)]
    gaps = sorted(b[0] - a[0] for a, b in itertools.pairwise(points))
    limit = max(1, 2 * gaps[len(gaps) // 2])
    found = [[points[0]]]
    for before, point in itertools.pairwise(points):
        if point[0] - before[0] > limit:
            found.append([])
        found[-1].append(point)
    return found


def step_ticks(first: int, last: int) -> list[int]:
    span = max(1, last - first)
    raw = span / 8
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    stride = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    start = math.ceil(first / stride) * stride
    return list(range(int(start), last + 1, int(max(1, stride))))


class _Box(NamedTuple):
    """A rectangle of a chart, with its fill and the title the browser shows on hover."""

    x: str
    y: str
    width: str
    height: str
    fill: str
    title: str


def shares(data: ReadableShares, colour_of: Mapping[str, str], timer: str) -> Markup:
    """Return the stacked bars of each window's share of the lap per top section."""
    bars = [(label, parts) for label, parts in data if parts]
    if not bars:
        return render("shares.svg.j2", boxes=None)
    height = 220
    inner_h = height - TOP - BOTTOM
    inner_w = WIDTH - LEFT - RIGHT
    width = inner_w / len(bars)
    grid = [Tick(px(TOP + (1 - share) * inner_h), f"{share:.0%}") for share in _SHARE_TICKS]
    boxes = []
    for index, (label, values) in enumerate(bars):
        bottom = 0.0
        left = LEFT + index * width
        for name, share in values.items():
            if share <= 0:
                continue
            top = bottom + share
            y, tall = px(TOP + (1 - top) * inner_h), px(share * inner_h)
            colour = colour_of.get(name, OTHER_COLOUR)
            title = f"{label}: {short(name, timer)} {share:.1%}"
            boxes.append(_Box(px(left + 0.5), y, px(max(0.5, width - 1)), tall, colour, title))
            bottom = top
    return render(
        "shares.svg.j2",
        width=WIDTH, height=height, left=LEFT, right=WIDTH - RIGHT, grid=grid, boxes=boxes,
        first=bars[0][0], last=bars[-1][0],
    )  # fmt: skip


_SHARE_TICKS = (0, 0.25, 0.5, 0.75, 1.0)
ReadableShares = Sequence[tuple[str, Mapping[str, float]]]


def legend(sections: Sequence[str], colour_of: Mapping[str, str], timer: str) -> Markup:
    """Return the colour legend of the sections (and "other")."""
    keys = [(colour_of[path], short(path, timer)) for path in (*sections, OTHER)]
    return render("legend.html.j2", keys=keys, more=0, marks=None)


def rank_legend(ranks: Sequence[int]) -> Markup:
    """Return the colour legend of the timeline's ranks (and of its marks)."""
    keys = [
        (RANK_PALETTE[i % len(RANK_PALETTE)], f"rank {rank}") for i, rank in enumerate(ranks[:16])
    ]
    marks = [(SLOW_COLOUR, "slow lap"), (OCCASIONAL_COLOUR, "occasional section")]
    return render("legend.html.j2", keys=keys, more=max(0, len(ranks) - 16), marks=marks)


def heatmap(
    excess: Mapping[int, Mapping[str, float]], sections: Sequence[str], timer: str
) -> Markup:
    """Return the rank x section grid of the excess time per lap over the median rank."""
    ranks = sorted(excess, key=lambda r: (-sum(max(0.0, v) for v in excess[r].values()), r))
    largest = max((abs(v) for row in excess.values() for v in row.values()), default=0.0)
    cell_w, cell_h, label_w, head_h = 82, 18, 70, 64
    columns = [
        (px(label_w + column * cell_w + cell_w / 2), short(path, timer))
        for column, path in enumerate(sections)
    ]
    rows = []
    for row, rank in enumerate(ranks):
        y = head_h + row * cell_h
        cells = []
        for column, path in enumerate(sections):
            value = excess[rank].get(path)
            if value is None:
                continue
            strength = 0.0 if largest <= 0 else min(1.0, abs(value) / largest)
            rgb = "214,39,40" if value > 0 else "31,119,180"
            colour = f"rgba({rgb},{0.08 + 0.92 * strength:.2f})"
            sign = "+" if value >= 0 else "-"
            text = (
                f"rank {rank}, {short(path, timer)}: {sign}{format_seconds(abs(value))} "
                "per lap over the median rank"
            )
            x = str(label_w + column * cell_w)
            cells.append(_Box(x, str(y), str(cell_w - 1), str(cell_h - 1), colour, text))
        rows.append((rank, y, px(y + cell_h / 2), cells))
    return render(
        "heatmap.svg.j2",
        width=label_w + cell_w * len(sections), height=head_h + cell_h * len(ranks),
        label_w=label_w, head_h=head_h, columns=columns, rows=rows,
    )  # fmt: skip


class _Bar(NamedTuple):
    """A span's row of a waterfall: its label and its bar."""

    rank: int
    indent: Markup
    name: str
    y_text: str
    box: _Box
    error: bool


def waterfall(
    step: int, spans: Sequence[SpanRecord], colour_of: Mapping[str, str], timer: str
) -> Markup:
    """Return the waterfall of one traced step: a bar per span, rows by rank then start.

    Each rank's bars start from that rank's first span of the step: the clocks of different
    hosts agree to a millisecond at best, and a lap's parts are what the ranks compare.
    """
    origin: dict[int, int] = {}
    for span in spans:
        origin[span.rank] = min(origin.get(span.rank, span.start_ns), span.start_ns)
    length = max([1, *(span.end_ns - origin[span.rank] for span in spans)])
    depth = _depths(spans)
    ordered = sorted(spans, key=lambda s: (s.rank, s.start_ns, depth[s.span_id]))
    label_w, row_h = 230, 16
    inner_w = WIDTH - label_w - RIGHT
    bars = []
    for row, span in enumerate(ordered):
        y = 20 + row * row_h
        start = span.start_ns - origin[span.rank]
        left = label_w + start / length * inner_w
        width = max(1.0, span.duration_ns / length * inner_w)
        text = (
            f"rank {span.rank} {span.path}: {format_seconds(span.duration_ns / 1e9)}, "
            f"starts at +{format_seconds(start / 1e9)}" + (", error" if span.error else "")
        )
        colour = _span_colour(span.path, colour_of, timer)
        box = _Box(px(left), str(y + 2), px(width), str(row_h - 4), colour, text)
        indent = Markup("\u2003" * depth[span.span_id])  # em spaces, shown as they are
        bars.append(_Bar(span.rank, indent, span.name, px(y + row_h / 2), box, span.error))
    return render(
        "waterfall.svg.j2",
        step=step, width=WIDTH, height=20 + row_h * len(ordered), label_w=label_w,
        right=WIDTH - RIGHT, length=format_seconds(length / 1e9), bars=bars,
    )  # fmt: skip


def _depths(spans: Sequence[SpanRecord]) -> dict[str, int]:
    parent = {span.span_id: span.parent_id for span in spans}
    depths: dict[str, int] = {}
    for span in spans:
        depth, node, seen = 0, span.parent_id, 0
        while node in parent and seen < 64:
            depth, node, seen = depth + 1, parent[node], seen + 1
        depths[span.span_id] = depth
    return depths


def _span_colour(path: str, colour_of: Mapping[str, str], timer: str) -> str:
    """Return the colour of the top section a span belongs to (grey for the timer itself)."""
    sections = {section: colour for section, colour in colour_of.items() if section != OTHER}
    colour = palette.colour_of(path, sections)
    if colour is not None:
        return colour
    return TIMER_COLOUR if path == timer else OTHER_COLOUR
