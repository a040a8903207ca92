"""`looptrace plot`: one PNG of where the time of a loop goes (matplotlib, the `plot` extra).

Top: the time of each step split into its sections, stacked; rare slow steps (an evaluation,
a checkpoint) are cut at a readable height and labelled with their value. Below: the duration
of every section on a log axis, with p50 and p99 marked, and with several ranks, each rank's
mean step split the same way, the slowest one named.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from looptrace._base.units import format_seconds
from looptrace._base.version import version
from looptrace._offline import palette
from looptrace._offline.output import SOFTWARE_KEY
from looptrace._offline.plot_data import SELF, PlotData

_MAX_BARS = 120
_MAX_LABELS = 12
_MAX_LABEL = 40  # characters of a section's name in a legend or on an axis


def draw(data: PlotData, output: Path, width_px: int, height_px: int) -> None:
    """Draw `data` and save it as a PNG of exactly `width_px` x `height_px` pixels."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - matplotlib is an extra

    fig = Figure(figsize=(width_px / 100, height_px / 100), dpi=100, layout="constrained")
    grid = fig.add_gridspec(2, 2 if data.ranks else 1, height_ratios=(1.0, 1.0))
    steps_ax = fig.add_subplot(grid[0, :])
    colors = _colors(list(data.layers))
    _draw_steps(steps_ax, data, colors)
    _draw_distributions(fig.add_subplot(grid[1, 0]), data, colors)
    if data.ranks:
        _draw_ranks(fig.add_subplot(grid[1, 1]), data, colors)
    fig.suptitle(f"looptrace: {_short(data.timer)}  ({data.source})", fontsize=11)
    software = {SOFTWARE_KEY: f"looptrace {version()}"}  # marks the file as ours to overwrite
    fig.savefig(output, dpi=100, format="png", metadata=software)


def _colors(names: Sequence[str]) -> dict[str, str]:
    """Return the shared palette's colour of each section layer (the report's and watch's)."""
    colors = palette.colours(n for n in names if n != SELF)
    colors[SELF] = palette.TIMER_COLOUR
    return colors


def _draw_steps(ax: Any, data: PlotData, colors: dict[str, str]) -> None:
    x = data.steps
    lefts, widths = _columns(x, data.per_window)
    bottoms = [0.0] * len(x)
    bars = len(x) <= _MAX_BARS
    visible = 1e-6 * max((max(v, default=0.0) for v in data.layers.values()), default=0.0)
    for name, values in data.layers.items():
        if max(values, default=0.0) <= visible:
            continue  # e.g. a timer's own time when its sections cover it all
        label = _fit(_short(name, data.timer))
        tops = [b + v for b, v in zip(bottoms, values, strict=True)]
        if bars:
            ax.bar(
                lefts,
                values,
                [0.9 * w for w in widths],
                bottom=bottoms,
                align="edge",
                color=colors[name],
                label=label,
                linewidth=0,
            )
        else:  # one polygon per section: thousands of steps draw fast and without seams
            edges = [*lefts, lefts[-1] + widths[-1]]
            ax.stairs(tops, edges, baseline=bottoms, fill=True, color=colors[name], label=label)
        bottoms = tops
    _cut_outliers(ax, [a + w / 2 for a, w in zip(lefts, widths, strict=True)], bottoms)
    ax.yaxis.set_major_formatter(_seconds_formatter())
    ax.set_xlabel("step")
    ax.set_ylabel("time per step")
    what = "mean time per step in each window" if data.per_window else "time per step"
    ax.set_title(f"{_short(data.timer)}: {what}, by section", loc="left", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(  # top to bottom as stacked
        handles[::-1],
        labels[::-1],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
        frameon=False,
    )
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if x:
        ax.set_xlim(lefts[0], lefts[-1] + widths[-1])


def _columns(x: Sequence[int], per_window: bool) -> tuple[list[float], list[float]]:
    """Return the left edge and width of each step's column.

    A step is one unit wide, centred on it; a window spans from the previous window's step
    (0 for the first) to its own.
    """
    if not per_window:
        return [s - 0.5 for s in x], [1.0] * len(x)
    lefts = [0.0, *x[:-1]] if x else []
    return lefts, [max(1.0, s - left) for s, left in zip(x, lefts, strict=True)]


def _cut_outliers(ax: Any, x: Sequence[float], totals: Sequence[float]) -> None:
    """Keep ordinary steps readable: cut rare tall steps and label them with their value."""
    if len(totals) < 10:
        return
    ordered = sorted(totals)
    typical = ordered[int(0.9 * (len(ordered) - 1))]
    if typical <= 0 or ordered[-1] <= 3 * typical:
        return
    top = 2 * typical
    ax.set_ylim(0, top)
    tall = [(v, s) for s, v in zip(x, totals, strict=True) if v > top]
    room = 0.04 * (max(x) - min(x))  # labels closer than this would overlap
    labelled: list[float] = []
    for value, step in sorted(tall, reverse=True):
        if len(labelled) == _MAX_LABELS or any(abs(step - o) < room for o in labelled):
            continue
        labelled.append(step)
        ax.annotate(
            format_seconds(value),
            (step, top),
            xytext=(0, -3),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=7,
            color="#333333",
            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
        )
    ax.text(
        1.0,
        1.01,
        f"{len(tall)} taller steps cut at {format_seconds(top)}, labelled with their time",
        transform=ax.transAxes,
        ha="right",
        va="bottom",
        fontsize=8,
        color="#444444",
    )


def _draw_distributions(ax: Any, data: PlotData, colors: dict[str, str]) -> None:
    rng = random.Random(0)
    rows = list(reversed(data.sections))  # first section on top
    for row, path in enumerate(rows):
        stats = data.stats[path]
        if not math.isnan(stats.min) and not math.isnan(stats.max):
            ax.plot([stats.min, stats.max], [row, row], color="#999999", lw=1, zorder=1)
        dots = [v for v in data.samples.get(path, ()) if v > 0]
        if dots:
            jitter = [row + rng.uniform(-0.25, 0.25) for _ in dots]
            shown = {name: c for name, c in colors.items() if name not in (SELF, palette.OTHER)}
            colour = palette.colour_of(path, shown) or palette.TIMER_COLOUR
            ax.scatter(dots, jitter, s=4, alpha=0.35, color=colour, lw=0, zorder=2)
        if not math.isnan(stats.p50):
            ax.plot(stats.p50, row, marker="|", ms=16, mew=2.5, color="black", zorder=3)
        if not math.isnan(stats.p99):
            ax.plot(stats.p99, row, marker="D", ms=5, color="#d62728", zorder=3)
    ax.set_yticks(range(len(rows)), [_fit(_short(p)) for p in rows], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(_seconds_formatter())
    low, high = ax.get_xlim()
    from matplotlib.ticker import LogLocator, NullFormatter  # noqa: PLC0415

    if high < 100 * low:  # under two decades, label the 2, 3, 5 ticks in seconds too
        ax.xaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 3.0, 5.0)))
        ax.xaxis.set_minor_formatter(_seconds_formatter())
    else:
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", which="both", labelsize=8)
    ax.grid(axis="x", alpha=0.3, which="major")
    ax.set_axisbelow(True)
    ax.set_title("duration of each section (log scale)", loc="left", fontsize=10)
    ax.plot([], [], marker="|", ms=10, mew=2.5, ls="", color="black", label="p50")
    ax.plot([], [], marker="D", ms=5, ls="", color="#d62728", label="p99")
    ax.plot([], [], color="#999999", label="min–max")
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)


def _draw_ranks(ax: Any, data: PlotData, colors: dict[str, str]) -> None:
    ranks = sorted(data.ranks)
    bottoms = [0.0] * len(ranks)
    for name in data.layers:
        values = [data.ranks[r].get(name, 0.0) for r in ranks]
        if not any(values):
            continue
        ax.bar(ranks, values, 0.8, bottom=bottoms, color=colors[name], linewidth=0)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    slowest = max(range(len(ranks)), key=lambda i: bottoms[i])
    ax.annotate(
        f"slowest\n{format_seconds(bottoms[slowest])}",
        (ranks[slowest], bottoms[slowest]),
        xytext=(0, 3),
        textcoords="offset points",
        ha="center",
        va="bottom",
        fontsize=8,
    )
    ax.set_ylim(0, max(bottoms) * 1.2 if max(bottoms) > 0 else 1)
    ax.yaxis.set_major_formatter(_seconds_formatter())
    ax.set_xticks(ranks, [str(r) for r in ranks], fontsize=8 if len(ranks) <= 32 else 6)
    ax.set_xlabel("rank")
    ax.set_title(f"mean time per step of {_short(data.timer)}, by rank", loc="left", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _seconds_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter  # noqa: PLC0415

    return FuncFormatter(lambda value, _pos: format_seconds(value) if value > 0 else "0")


def _fit(label: str, limit: int = _MAX_LABEL) -> str:
    """Return `label` cut to `limit` characters, keeping its last components (hook names).

    Lightning's hook paths run to a hundred characters; untouched they squeeze the chart.
    """
    if len(label) <= limit:
        return label
    parts = label.split(".")
    kept = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + len(kept) + 3 > limit:
            break
        kept = f"{part}.{kept}"
    return "…." + kept if len(kept) + 2 <= limit else "…" + kept[-(limit - 1) :]


def _short(path: str, parent: str = "") -> str:
    """Return a label: the path below `parent`, else without its leading `root.`."""
    if parent and path.startswith(parent + "."):
        return path[len(parent) + 1 :]
    return path.removeprefix("root.")
