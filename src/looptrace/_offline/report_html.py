"""`looptrace report`: one self-contained HTML page (inline SVG, CSS and script, no request).

The page is the template `templates/page.html.j2`; this module gathers what it shows.
"""

from __future__ import annotations

import math
from typing import NamedTuple, cast

from looptrace._base.units import format_seconds
from looptrace._offline import report_svg as svg
from looptrace._offline.report_data import MAX_HEATMAP_RANKS, ReportData, excess_over_median
from looptrace._offline.report_jinja import environment
from looptrace._offline.report_system import system_section
from looptrace._offline.table import tree_paths

SLOWEST = 5
FINDINGS = 20  # findings listed; the rest are counted
HEATMAP_SECTIONS = 12
HEAD = ("section", "count", "mean", "p50", "p99", "total", "% parent", "self")
SYSTEM_HEAD = ("figure", "rank", "mean", "max", "samples")


class _Slow(NamedTuple):
    """A line of the slowest sections."""

    path: str
    self_time: str
    share: str
    p50: str
    p99: str
    spread: str


class _Row(NamedTuple):
    """A row of the tree table: its tree order, the section and its (sort key, text) cells."""

    order: str
    path: str
    name: str
    cells: list[tuple[str, str]]


def render(data: ReportData, made_by: str) -> str:
    """Return the whole page."""
    colour_of = svg.colours(data.top)
    timeline, hover, down_note = svg.timeline(data)
    heatmap, heatmap_cut = _heatmap(data)
    page = environment().get_template("page.html.j2")
    return page.render(
        title=f"looptrace report: {data.timer}",
        description=data.description,
        glance=_glance(data, made_by),
        hang=data.hang,
        diagnosed=data.diagnosed,
        findings=[
            (item.severity, item.text(action=False), item.action)
            for item in data.findings[:FINDINGS]
        ],
        more_findings=len(data.findings) - FINDINGS,
        slowest=_slowest(data),
        traced=bool(data.laps),
        timer=data.timer,
        timeline=timeline,
        rank_legend=svg.rank_legend(cast("list[int]", hover["ranks"])) if hover else "",
        down_note=down_note,
        shares=svg.shares(data.shares, colour_of, data.timer),
        shares_note=data.shares_note,
        legend=svg.legend(data.top, colour_of, data.timer),
        heatmap=heatmap,
        heatmap_cut=heatmap_cut,
        head=HEAD,
        rows=_tree_rows(data),
        estimated=data.estimated,
        waterfalls=[
            (step, svg.waterfall(step, spans, colour_of, data.timer))
            for step, spans in sorted(data.waterfalls.items())
        ],
        waterfall_note=data.waterfall_note,
        system=None if data.system is None else system_section(data.system),
        system_head=SYSTEM_HEAD,
        payload={
            "hover": hover,
            "waterfalls": sorted(data.waterfalls),
            "initial": _initial_step(data),
        },
    )


def _glance(data: ReportData, made_by: str) -> list[tuple[str, str]]:
    ranks = data.ranks
    shown = ", ".join(map(str, ranks[:8])) + (f" … {ranks[-1]}" if len(ranks) > 8 else "")
    throughput = data.steps / data.wall_s if data.wall_s > 0 and data.steps else math.nan
    return [
        (str(len(ranks)), f"rank{'s' * (len(ranks) != 1)} ({shown})"),
        (str(data.steps), f"laps of {data.timer}"),
        (str(data.windows), "windows"),
        (format_seconds(data.wall_s), "wall time"),
        ("-" if math.isnan(throughput) else f"{throughput:.3g}/s", "steps per second"),
        *((f"{rate:.3g}/s", f"{unit} per second") for unit, rate in data.rates.items()),
        *([] if data.memory is None else [data.memory]),
        (str(len(data.waterfalls)), "traced steps with a waterfall"),
        (made_by, "report made by"),
    ]


def _slowest(data: ReportData) -> list[_Slow]:
    """Return the sections with the most self time."""
    whole = data.stats[data.timer].total if data.timer in data.stats else math.nan
    candidates = [
        path
        for path, stats in data.stats.items()
        if path != data.timer and not math.isnan(stats.self_time) and stats.self_time > 0
    ]
    candidates.sort(key=lambda p: -data.stats[p].self_time)
    found = []
    for path in candidates[:SLOWEST]:
        stats = data.stats[path]
        share = f"{stats.self_time / whole:.1%} of {data.timer}" if whole > 0 else ""
        spread = ""
        if len(data.per_rank) > 1:
            means = {
                rank: s[path].mean
                for rank, s in data.per_rank.items()
                if path in s and not math.isnan(s[path].mean)
            }
            if means:
                worst = max(means, key=lambda r: (means[r], -r))
                spread = f"; slowest rank {worst} (mean {format_seconds(means[worst])})"
        found.append(
            _Slow(
                path,
                format_seconds(stats.self_time),
                share,
                format_seconds(stats.p50),
                format_seconds(stats.p99),
                spread,
            )
        )
    return found


def _heatmap(data: ReportData) -> tuple[str | None, int]:
    """Return the heatmap (None: one rank) and how many ranks it keeps of more (0: all)."""
    if len(data.per_rank) < 2:
        return None, 0
    sections = [
        path
        for path in sorted(data.stats, key=lambda p: -_finite(data.stats[p].total))
        if path != data.timer
    ][:HEATMAP_SECTIONS]
    excess = excess_over_median(data, sections)
    cut = 0
    if len(excess) > MAX_HEATMAP_RANKS:
        ordered = sorted(excess, key=lambda r: -sum(max(0.0, v) for v in excess[r].values()))
        excess = {rank: excess[rank] for rank in ordered[:MAX_HEATMAP_RANKS]}
        cut = MAX_HEATMAP_RANKS
    return svg.heatmap(excess, sections, data.timer), cut


def _finite(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _tree_rows(data: ReportData) -> list[_Row]:
    rows = []
    for order, (path, parent, depth) in enumerate(tree_paths(data.stats)):
        stats = data.stats[path]
        share = (
            100 * stats.total / data.stats[parent].total
            if parent and data.stats[parent].total > 0
            else math.nan
        )
        name = "  " * depth + (path[len(parent) + 1 :] if parent else path)
        cells = [(str(stats.count), str(stats.count))]
        cells += [_number(v, format_seconds(v)) for v in (stats.mean, stats.p50, stats.p99)]
        cells.append(_number(stats.total, format_seconds(stats.total)))
        cells.append(_number(share, "" if math.isnan(share) else f"{share:.1f}"))
        cells.append(_number(stats.self_time, format_seconds(stats.self_time)))
        rows.append(_Row(f"{order:08d}", path, name, cells))
    return rows


def _number(value: float, text: str) -> tuple[str, str]:
    """Return a cell's sort key (-1 for none) and text."""
    sort = -1 if math.isnan(value) else value
    return f"{sort:.9g}", text


def _initial_step(data: ReportData) -> int | None:
    """Return the step whose waterfall shows first: the slowest lap that has one."""
    if not data.waterfalls:
        return None
    laps = [lap for laps in data.laps.values() for lap in laps if lap.step in data.waterfalls]
    if not laps:
        return min(data.waterfalls)
    return max(laps, key=lambda lap: lap.seconds).step
