"""The System section of `looptrace report`: the sampled CPU, memory and GPU figures.

A sortable table of each figure per rank (the mean over every sample of its windows, the max,
the samples), and charts over the steps of each window's mean process CPU per rank and, where
sampled, of each GPU's utilisation per rank and device. The charts are drawn as the step
timeline is (`report_svg`'s lines, ticks and margins; the template `system.svg.j2`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from markupsafe import Markup

from looptrace._offline.report_bounds import (
    EXTREME_RANKS,
    EXTREME_SERIES,
    MAX_SYSTEM_POINTS,
    MAX_SYSTEM_RANKS,
    MAX_SYSTEM_SERIES,
    extremes_first,
    thinned,
)
from looptrace._offline.report_jinja import render
from looptrace._offline.report_svg import (
    BOTTOM,
    LEFT,
    RANK_PALETTE,
    RIGHT,
    TOP,
    WIDTH,
    Tick,
    px,
    rank_line,
    segments,
    step_ticks,
)
from looptrace._offline.system_view import SystemSeries, format_figure

MAX_DOTS = 2_000  # windows of one chart drawn with a dot (and its value on hover); beyond, lines
MAX_KEYS = 16  # series named in a chart's legend
HEIGHT = 180


class SystemRow(NamedTuple):
    """A row of the system table: its place in the first order, and its (sort key, text) cells."""

    order: str
    figure: str
    rank: str
    cells: list[tuple[str, str]]


class Chart(NamedTuple):
    """A chart of the section, the legend of its lines and what it left out ("": nothing)."""

    svg: Markup
    legend: Markup
    note: str


class SystemSection(NamedTuple):
    """What the page's System section shows."""

    rows: list[SystemRow]
    table_note: str  # the ranks each figure's rows keep ("": every rank)
    cpu: Chart | None  # process CPU per rank (None: not sampled)
    gpu: Chart | None  # GPU utilisation per rank and device (None: no GPU sampled)


class _Dot(NamedTuple):
    """A window's point on a chart, with its exact value as its title."""

    x: str
    y: str
    colour: str
    title: str


def system_section(series: SystemSeries) -> SystemSection:
    """Return the table rows and charts of the system figures."""
    rows: list[SystemRow] = []
    table_note = ""
    for figure in series.figures:
        kept = extremes_first(
            {rank: stats.mean for rank, stats in figure.ranks.items()},
            MAX_SYSTEM_RANKS,
            EXTREME_RANKS,
            lambda rank: f"rank {rank}",
            "mean",
        )
        if kept.note and not table_note:
            table_note = (
                f"Rows per figure: {MAX_SYSTEM_RANKS} ranks where more sampled it, the first ones "
                f"and the {EXTREME_RANKS} with the highest and the {EXTREME_RANKS} with the lowest "
                f"mean of that figure ({figure.name}: {kept.note})."
            )
        for rank in kept.keys:
            stats = figure.ranks[rank]
            cells = [
                (f"{value:.9g}", format_figure(figure.name, value))
                for value in (stats.mean, stats.max)
            ]
            cells.append((str(stats.samples), str(stats.samples)))
            rows.append(SystemRow(f"{len(rows):08d}", figure.name, str(rank), cells))
    return SystemSection(
        rows=rows,
        table_note=table_note,
        cpu=percent_chart(series.cpu, "system-cpu", "process CPU per window and rank")
        if series.cpu
        else None,
        gpu=percent_chart(series.gpu, "system-gpu", "GPU utilisation per window, rank and device")
        if series.gpu
        else None,
    )


def percent_chart(given: Mapping[str, Sequence[tuple[int, float]]], name: str, label: str) -> Chart:
    """Return a chart of percent figures over the steps: a line per series, 0% at the bottom.

    The axis reaches 100% at least (a process busy on several cores goes past it, in hundreds).
    Past `MAX_SYSTEM_SERIES` series it draws the first ones and those of extreme mean; past
    `MAX_SYSTEM_POINTS` points, the lowest and highest of each bucket of steps.
    """
    inner_h = HEIGHT - TOP - BOTTOM
    inner_w = WIDTH - LEFT - RIGHT
    kept = extremes_first(
        {title: math.fsum(v for _, v in points) / len(points) for title, points in given.items()},
        MAX_SYSTEM_SERIES,
        EXTREME_SERIES,
        str,
        "mean",
    )
    budget = max(2, MAX_SYSTEM_POINTS // len(kept.keys))
    series = {title: thinned(given[title], budget) for title in kept.keys}
    values = [value for points in series.values() for _, value in points]
    steps = [step for points in series.values() for step, _ in points]
    first, last = min(steps), max(steps)
    span = max(1, last - first)
    high = max(100.0, 100.0 * math.ceil(max(values) / 100.0))
    notes = [f"Lines drawn: {kept.note}."] if kept.note else []
    total = sum(len(given[title]) for title in kept.keys)
    if len(values) < total:
        notes.append(
            f"Down-sampled: {len(values):,} of {total:,} windows drawn, the lowest and highest "
            "of each bucket of steps."
        )

    def x(step: float) -> float:
        return LEFT + (step - first) / span * inner_w

    def y(value: float) -> float:
        return TOP + (1 - max(0.0, value) / high) * inner_h

    lines, dots = [], []
    every = len(values) <= MAX_DOTS
    for index, (title, points) in enumerate(series.items()):
        colour = RANK_PALETTE[index % len(RANK_PALETTE)]
        for segment in segments(points):
            line = rank_line([(x(step), y(value)) for step, value in segment], colour, title)
            lines.append(line)
            if line.dot and not every:  # a lone window: its dot is all there is of it
                dots.append(_Dot(line.x, line.y, colour, title))
        if every:
            dots += [
                _Dot(px(x(step)), px(y(value)), colour, f"{title}, step {step}: {value:.3g}%")
                for step, value in points
            ]
    ticks = [high * share for share in (0.0, 0.25, 0.5, 0.75, 1.0)]
    svg = render(
        "system.svg.j2",
        id=name, label=label, width=WIDTH, height=HEIGHT, left=LEFT, right=WIDTH - RIGHT,
        y_ticks=[Tick(px(y(tick)), f"{tick:.0f}%") for tick in ticks],
        x_ticks=[(px(x(step)), step) for step in step_ticks(first, last)],
        lines=lines, dots=dots,
    )  # fmt: skip
    keys = [
        (RANK_PALETTE[index % len(RANK_PALETTE)], title)
        for index, title in enumerate(list(series)[:MAX_KEYS])
    ]
    more = max(0, len(series) - MAX_KEYS)
    legend = render("legend.html.j2", keys=keys, more=more, marks=None)
    return Chart(svg, legend, " ".join(notes))
