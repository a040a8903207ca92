"""The charts of `looptrace report`, drawn as inline SVG (no charting library, no script needed).

Every mark carries a `<title>` with its exact values (the browser shows it on hover); the
page's small script adds the step crosshair, the click that opens a waterfall and sorting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING

from looptrace._offline.report_data import OTHER, Lap, ReportData
from looptrace._offline.table import format_seconds

if TYPE_CHECKING:
    from looptrace._offline.span_records import SpanRecord

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
OTHER_COLOUR = "#c7c7c7"
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
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 12, 28


def colours(sections: Sequence[str]) -> dict[str, str]:
    """Return one colour per section path (the page uses the same everywhere)."""
    mapping = {path: PALETTE[i % len(PALETTE)] for i, path in enumerate(sections)}
    mapping[OTHER] = OTHER_COLOUR
    return mapping


def short(path: str, timer: str) -> str:
    """Return a path relative to the timer (`forward.encoder`), or the path itself."""
    return path[len(timer) + 1 :] if path.startswith(timer + ".") else path


def _f(value: float) -> str:
    return f"{value:.1f}"


def _attr(text: str) -> str:
    return escape(text, quote=True)


def downsample(laps: Sequence[Lap], budget: int) -> list[tuple[int, float]]:
    """Return `(step, seconds)` points: all of them, or the min and max of each bucket."""
    points = [(lap.step, lap.seconds) for lap in laps]
    if len(points) <= budget:
        return points
    buckets = max(1, budget // 2)
    size = math.ceil(len(points) / buckets)
    kept: list[tuple[int, float]] = []
    for start in range(0, len(points), size):
        chunk = points[start : start + size]
        low = min(chunk, key=lambda p: p[1])
        high = max(chunk, key=lambda p: p[1])
        kept += sorted({low, high})
    return kept


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
        return _TOP + (1 - share) * self.height

    def ticks(self) -> list[float]:
        ticks, tick = [], self.low
        while tick <= self.high * 1.0001:
            ticks.append(tick)
            tick *= 10
        return ticks


def timeline(data: ReportData) -> tuple[str, dict[str, object], str]:
    """Return the step timeline SVG, the points the hover reads, and a down-sampling note.

    Without span files it draws each window's mean lap per rank instead.
    """
    height = 240
    inner_h = height - _TOP - _BOTTOM
    inner_w = WIDTH - _LEFT - _RIGHT
    series: dict[int, list[tuple[int, float]]]
    note = ""
    if data.laps:
        total = sum(len(laps) for laps in data.laps.values())
        budget = max(2, MAX_POINTS // max(1, len(data.laps)))
        series = {rank: downsample(laps, budget) for rank, laps in data.laps.items()}
        drawn = sum(len(points) for points in series.values())
        if drawn < total:
            note = (
                f"The timeline is down-sampled: {drawn:,} of {total:,} laps drawn, the "
                "shortest and longest of each bucket of steps, so slow steps stay visible."
            )
    else:
        series = dict(data.window_means)
    values = [s for points in series.values() for _, s in points]
    steps = [step for points in series.values() for step, _ in points]
    if not values:
        return "<p>No laps of the timer in the input.</p>", {}, note
    first, last = min(steps), max(steps)
    span = max(1, last - first)
    axis = _LogAxis(values, inner_h)

    def x(step: float) -> float:
        return _LEFT + (step - first) / span * inner_w

    parts = [
        f'<svg id="timeline" class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
        f'height="{height}" data-first="{first}" data-last="{last}" data-left="{_LEFT}" '
        f'data-width="{inner_w}" role="img" aria-label="lap duration per step and rank">'
    ]
    for tick in axis.ticks():
        y = _f(axis.y(tick))
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{WIDTH - _RIGHT}" y1="{y}" y2="{y}"/>'
            f'<text class="tick" x="{_LEFT - 6}" y="{y}" text-anchor="end" '
            f'dominant-baseline="middle">{escape(format_seconds(tick))}</text>'
        )
    for step in _step_ticks(first, last):
        parts.append(
            f'<text class="tick" x="{_f(x(step))}" y="{height - 8}" '
            f'text-anchor="middle">{step}</text>'
        )
    for index, (rank, points) in enumerate(series.items()):
        colour = RANK_PALETTE[index % len(RANK_PALETTE)]
        path = " ".join(f"{_f(x(step))},{_f(axis.y(s))}" for step, s in points)
        parts.append(
            f'<polyline class="lap-line" fill="none" stroke="{colour}" stroke-width="1.2" '
            f'points="{path}"><title>rank {rank}</title></polyline>'
        )
    for laps in data.laps.values():
        for lap in laps:
            if lap.slow is None and not lap.occasional:
                continue
            kind = "slow" if lap.slow is not None else "occasional"
            colour = SLOW_COLOUR if kind == "slow" else OCCASIONAL_COLOUR
            what = (
                f"slow lap ({lap.slow:.1f}x the median)" if lap.slow is not None else lap.occasional
            )
            label = f"step {lap.step}, rank {lap.rank}: {format_seconds(lap.seconds)}, {what}"
            parts.append(
                f'<circle class="mark {kind}" data-step="{lap.step}" data-rank="{lap.rank}" '
                f'cx="{_f(x(lap.step))}" cy="{_f(axis.y(lap.seconds))}" r="4" fill="{colour}">'
                f"<title>{escape(label)}</title></circle>"
            )
    parts.append(
        f'<line id="crosshair" x1="0" x2="0" y1="{_TOP}" y2="{_TOP + inner_h}" '
        'visibility="hidden"/></svg>'
    )
    hover: dict[str, object] = {
        "ranks": list(series),
        "points": {
            str(rank): [(step, float(f"{s:.4g}")) for step, s in points]
            for rank, points in series.items()
        },
    }
    return "".join(parts), hover, note


def _step_ticks(first: int, last: int) -> list[int]:
    span = max(1, last - first)
    raw = span / 8
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    stride = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    start = math.ceil(first / stride) * stride
    return list(range(int(start), last + 1, int(max(1, stride))))


def shares(data: ReadableShares, colour_of: Mapping[str, str], timer: str) -> str:
    """Return the stacked bars of each window's share of the lap per top section."""
    bars = [(label, parts) for label, parts in data if parts]
    if not bars:
        return "<p>No windows with laps of the timer.</p>"
    height = 220
    inner_h = height - _TOP - _BOTTOM
    inner_w = WIDTH - _LEFT - _RIGHT
    width = inner_w / len(bars)
    parts = [
        f'<svg id="shares" class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
        f'height="{height}" role="img" aria-label="share of the lap per section and window">'
    ]
    for share in (0, 0.25, 0.5, 0.75, 1.0):
        y = _f(_TOP + (1 - share) * inner_h)
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{WIDTH - _RIGHT}" y1="{y}" y2="{y}"/>'
            f'<text class="tick" x="{_LEFT - 6}" y="{y}" text-anchor="end" '
            f'dominant-baseline="middle">{share:.0%}</text>'
        )
    for index, (label, values) in enumerate(bars):
        bottom = 0.0
        left = _LEFT + index * width
        for name, share in values.items():
            if share <= 0:
                continue
            top = bottom + share
            parts.append(
                f'<rect x="{_f(left + 0.5)}" y="{_f(_TOP + (1 - top) * inner_h)}" '
                f'width="{_f(max(0.5, width - 1))}" '
                f'height="{_f(share * inner_h)}" fill="{colour_of.get(name, OTHER_COLOUR)}">'
                f"<title>{escape(f'{label}: {short(name, timer)} {share:.1%}')}</title></rect>"
            )
            bottom = top
    parts.append(
        f'<text class="tick" x="{_LEFT}" y="{height - 8}">{escape(bars[0][0])}</text>'
        f'<text class="tick" x="{WIDTH - _RIGHT}" y="{height - 8}" text-anchor="end">'
        f"{escape(bars[-1][0])}</text></svg>"
    )
    return "".join(parts)


ReadableShares = Sequence[tuple[str, Mapping[str, float]]]


def legend(sections: Sequence[str], colour_of: Mapping[str, str], timer: str) -> str:
    """Return the colour legend of the sections (and "other")."""
    items = [
        f'<span class="key"><i style="background:{colour_of[path]}"></i>'
        f"{escape(short(path, timer))}</span>"
        for path in (*sections, OTHER)
    ]
    return f'<div class="legend">{"".join(items)}</div>'


def rank_legend(ranks: Sequence[int]) -> str:
    """Return the colour legend of the timeline's ranks (and of its marks)."""
    items = [
        f'<span class="key"><i style="background:{RANK_PALETTE[i % len(RANK_PALETTE)]}"></i>'
        f"rank {rank}</span>"
        for i, rank in enumerate(ranks[:16])
    ]
    more = f"<span>… {len(ranks) - 16} more ranks</span>" if len(ranks) > 16 else ""
    marks = (
        f'<span class="key"><i style="background:{SLOW_COLOUR};border-radius:50%"></i>slow lap'
        f'</span><span class="key"><i style="background:{OCCASIONAL_COLOUR};border-radius:50%">'
        "</i>occasional section</span>"
    )
    return f'<div class="legend">{"".join(items)}{more}{marks}</div>'


def heatmap(excess: Mapping[int, Mapping[str, float]], sections: Sequence[str], timer: str) -> str:
    """Return the rank x section grid of the excess time per lap over the median rank."""
    ranks = sorted(excess, key=lambda r: (-sum(max(0.0, v) for v in excess[r].values()), r))
    largest = max((abs(v) for row in excess.values() for v in row.values()), default=0.0)
    cell_w, cell_h, label_w, head_h = 82, 18, 70, 64
    width = label_w + cell_w * len(sections)
    height = head_h + cell_h * len(ranks)
    parts = [
        f'<svg id="heatmap" class="chart" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="excess per rank and section">'
    ]
    for column, path in enumerate(sections):
        x = label_w + column * cell_w + cell_w / 2
        parts.append(
            f'<text class="tick" transform="translate({_f(x)},{head_h - 6}) rotate(-30)">'
            f"{escape(short(path, timer))}</text>"
        )
    for row, rank in enumerate(ranks):
        y = head_h + row * cell_h
        parts.append(
            f'<text class="tick" x="{label_w - 6}" y="{_f(y + cell_h / 2)}" text-anchor="end" '
            f'dominant-baseline="middle">rank {rank}</text>'
        )
        for column, path in enumerate(sections):
            value = excess[rank].get(path)
            if value is None:
                continue
            strength = 0.0 if largest <= 0 else min(1.0, abs(value) / largest)
            colour = (
                f"rgba(214,39,40,{0.08 + 0.92 * strength:.2f})"
                if value > 0
                else f"rgba(31,119,180,{0.08 + 0.92 * strength:.2f})"
            )
            sign = "+" if value >= 0 else "-"
            text = (
                f"rank {rank}, {short(path, timer)}: {sign}{format_seconds(abs(value))} "
                "per lap over the median rank"
            )
            parts.append(
                f'<rect x="{label_w + column * cell_w}" y="{y}" width="{cell_w - 1}" '
                f'height="{cell_h - 1}" fill="{colour}"><title>{escape(text)}</title></rect>'
            )
    parts.append("</svg>")
    return "".join(parts)


def waterfall(
    step: int, spans: Sequence[SpanRecord], colour_of: Mapping[str, str], timer: str
) -> str:
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
    inner_w = WIDTH - label_w - _RIGHT
    height = 20 + row_h * len(ordered)
    parts = [
        f'<svg class="chart waterfall" data-step="{step}" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="spans of step {step}">'
        f'<text class="tick" x="{label_w}" y="12">0</text>'
        f'<text class="tick" x="{WIDTH - _RIGHT}" y="12" text-anchor="end">'
        f"{escape(format_seconds(length / 1e9))}</text>"
    ]
    for row, span in enumerate(ordered):
        y = 20 + row * row_h
        left = label_w + (span.start_ns - origin[span.rank]) / length * inner_w
        bar = max(1.0, span.duration_ns / length * inner_w)
        indent = "\u2003" * depth[span.span_id]
        colour = _span_colour(span.path, colour_of, timer)
        outline = ' stroke="#d62728" stroke-width="2"' if span.error else ""
        text = (
            f"rank {span.rank} {span.path}: {format_seconds(span.duration_ns / 1e9)}, "
            f"starts at +{format_seconds((span.start_ns - origin[span.rank]) / 1e9)}"
            + (", error" if span.error else "")
        )
        parts.append(
            f'<text class="tick span-name" x="4" y="{_f(y + row_h / 2)}" '
            f'dominant-baseline="middle">r{span.rank} {indent}{escape(span.name)}</text>'
            f'<rect x="{_f(left)}" y="{y + 2}" width="{_f(bar)}" height="{row_h - 4}" '
            f'fill="{colour}"{outline}>'
            f"<title>{escape(text)}</title></rect>"
        )
    parts.append("</svg>")
    return "".join(parts)


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
    for section, colour in colour_of.items():
        if path == section or path.startswith(section + "."):
            return colour
    return "#8a8a8a" if path == timer else OTHER_COLOUR
