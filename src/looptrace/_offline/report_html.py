"""`looptrace report`: one self-contained HTML page (inline SVG, CSS and script, no request)."""

from __future__ import annotations

import json
import math
from html import escape

from looptrace._offline import report_svg as svg
from looptrace._offline.report_data import MAX_HEATMAP_RANKS, ReportData, excess_over_median
from looptrace._offline.table import format_seconds, tree_paths

SLOWEST = 5
HEATMAP_SECTIONS = 12

_CSS = """
:root{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
color:#222;background:#fafafa}
body{max-width:1060px;margin:0 auto;padding:12px 20px 40px}
h1{font-size:1.4em;margin:.4em 0}h2{font-size:1.1em;margin:1.4em 0 .4em;
border-bottom:1px solid #ddd;padding-bottom:.2em}
.glance{display:flex;flex-wrap:wrap;gap:8px}.glance div{background:#fff;border:1px solid #ddd;
border-radius:6px;padding:6px 12px}.glance b{display:block;font-size:1.2em}
.glance span{color:#666;font-size:.8em}
.chart{background:#fff;border:1px solid #ddd;max-width:100%;height:auto}
.grid{stroke:#eee}.tick{font-size:11px;fill:#555}
#crosshair{stroke:#999;stroke-dasharray:3 3;pointer-events:none}.mark{cursor:pointer}
#timeline{cursor:crosshair}
.legend{display:flex;flex-wrap:wrap;gap:12px;font-size:.85em;margin:4px 0}
.key i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
table{border-collapse:collapse;background:#fff;font-size:.85em}
th,td{border:1px solid #e3e3e3;padding:3px 8px;text-align:right}
th{background:#f0f0f0;cursor:pointer;user-select:none}td:first-child,th:first-child{text-align:left}
td.path{white-space:pre;font-family:ui-monospace,Menlo,Consolas,monospace}
.note{color:#666;font-size:.85em}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;font-size:12px;
padding:4px 7px;border-radius:4px;white-space:pre;display:none;z-index:2}
ol.slowest li{margin:.2em 0}
"""

_SCRIPT = """
(function(){
var data=JSON.parse(document.getElementById('lt-data').textContent);
var tip=document.getElementById('tip');
function nearest(list,v){var lo=0,hi=list.length-1;if(hi<0)return null;
while(lo<hi){var m=(lo+hi)>>1;if(list[m]<v)lo=m+1;else hi=m;}
if(lo>0&&Math.abs(list[lo-1]-v)<=Math.abs(list[lo]-v))lo--;return list[lo];}
function fmt(s){if(s>=1)return s.toPrecision(3)+' s';
if(s>=1e-3)return (s*1e3).toPrecision(3)+' ms';return (s*1e6).toPrecision(3)+' µs';}
function show(step){var w=document.getElementById('wf-'+step);
var box=document.getElementById('waterfall');if(!w||!box)return;
box.innerHTML='';box.appendChild(w.content.cloneNode(true));
document.getElementById('wf-title').textContent='step '+step;}
var tl=document.getElementById('timeline');
if(tl){var first=+tl.dataset.first,last=+tl.dataset.last,left=+tl.dataset.left,
width=+tl.dataset.width,cross=document.getElementById('crosshair');
var hover=data.hover.ranks.map(function(r){var pts=data.hover.points[r];
return {rank:r,pts:pts,steps:pts.map(function(p){return p[0];})};});
function scale(){return tl.getBoundingClientRect().width/tl.viewBox.baseVal.width;}
function stepAt(ev){var x=(ev.clientX-tl.getBoundingClientRect().left)/scale();
return first+(x-left)/width*Math.max(1,last-first);}
tl.addEventListener('mousemove',function(ev){var s=stepAt(ev);var lines=[];var at=null;
hover.forEach(function(h){var n=nearest(h.steps,s);if(n===null)return;
if(at===null)at=n;var p=h.pts[h.steps.indexOf(n)];
lines.push('rank '+h.rank+'  step '+p[0]+'  '+fmt(p[1]));});
if(!lines.length)return;var x=left+(at-first)/Math.max(1,last-first)*width;
cross.setAttribute('x1',x);cross.setAttribute('x2',x);
cross.setAttribute('visibility','visible');
tip.textContent=lines.slice(0,12).join('\\n')+
(lines.length>12?'\\n… '+(lines.length-12)+' more ranks':'');tip.style.display='block';
tip.style.left=(ev.clientX+14)+'px';tip.style.top=(ev.clientY+14)+'px';});
tl.addEventListener('mouseleave',function(){tip.style.display='none';
cross.setAttribute('visibility','hidden');});
tl.addEventListener('click',function(ev){var t=ev.target.closest('[data-step]');
var s=(t&&t!==tl)?+t.dataset.step:nearest(data.waterfalls,stepAt(ev));
if(s!==null)show(s);});}
document.querySelectorAll('table.sortable th').forEach(function(th,i){
th.addEventListener('click',function(){var body=th.closest('table').tBodies[0];
var rows=Array.prototype.slice.call(body.rows);
var dir=th.dataset.dir==='asc'?-1:1;th.dataset.dir=dir===1?'asc':'desc';
rows.sort(function(a,b){var x=a.cells[i].dataset.v,y=b.cells[i].dataset.v;
if(x===undefined)return dir*a.dataset.order.localeCompare(b.dataset.order);
return dir*((+x)-(+y));});rows.forEach(function(r){body.appendChild(r);});});});
if(data.initial!==null)show(data.initial);
})();
"""


def render(data: ReportData, made_by: str) -> str:
    """Return the whole page."""
    colour_of = svg.colours(data.top)
    timeline, hover, down_note = svg.timeline(data)
    initial = _initial_step(data)
    payload = {"hover": hover, "waterfalls": sorted(data.waterfalls), "initial": initial}
    script_data = json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")
    title = f"looptrace report: {data.timer}"
    sections = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="note">{escape(data.description)}</p>',
        _glance(data, made_by),
        "<h2>Slowest sections</h2>",
        _slowest(data),
        "<h2>Step timeline</h2>",
        _timeline_caption(data),
        timeline,
        svg.rank_legend(list(data.laps or data.window_means)) if hover else "",
        f'<p class="note">{escape(down_note)}</p>' if down_note else "",
        "<h2>Share of the lap per window</h2>",
        svg.shares(data.shares, colour_of, data.timer),
        svg.legend(data.top, colour_of, data.timer),
        "<h2>Ranks: excess over the median rank</h2>",
        _heatmap(data),
        "<h2>Sections</h2>",
        _tree_table(data),
        '<h2>Waterfall of <span id="wf-title">a traced step</span></h2>',
        _waterfalls(data, colour_of),
    ]
    body = "\n".join(part for part in sections if part)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>\n{body}\n"
        '<div id="tip"></div>'
        f'<script type="application/json" id="lt-data">{script_data}</script>'
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


def _glance(data: ReportData, made_by: str) -> str:
    ranks = data.ranks
    shown = ", ".join(map(str, ranks[:8])) + (f" … {ranks[-1]}" if len(ranks) > 8 else "")
    throughput = data.steps / data.wall_s if data.wall_s > 0 and data.steps else math.nan
    items = [
        (str(len(ranks)), f"rank{'s' * (len(ranks) != 1)} ({shown})"),
        (str(data.steps), f"laps of {data.timer}"),
        (str(data.windows), "windows"),
        (format_seconds(data.wall_s), "wall time"),
        ("-" if math.isnan(throughput) else f"{throughput:.3g}/s", "steps per second"),
        (str(len(data.waterfalls)), "traced steps with a waterfall"),
        (made_by, "report made by"),
    ]
    cells = "".join(
        f"<div><b>{escape(value)}</b><span>{escape(what)}</span></div>" for value, what in items
    )
    return f'<div class="glance">{cells}</div>'


def _slowest(data: ReportData) -> str:
    """Return the sections with the most self time (diagnosis findings will replace them)."""
    whole = data.stats[data.timer].total if data.timer in data.stats else math.nan
    candidates = [
        path
        for path, stats in data.stats.items()
        if path != data.timer and not math.isnan(stats.self_time) and stats.self_time > 0
    ]
    candidates.sort(key=lambda p: -data.stats[p].self_time)
    items = []
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
        items.append(
            f"<li><b>{escape(path)}</b>: self time {escape(format_seconds(stats.self_time))}"
            f" ({escape(share)}), p50 {escape(format_seconds(stats.p50))}, "
            f"p99 {escape(format_seconds(stats.p99))}{escape(spread)}</li>"
        )
    if not items:
        return "<p>No section time in the input.</p>"
    return f'<ol class="slowest">{"".join(items)}</ol>'


def _timeline_caption(data: ReportData) -> str:
    if data.laps:
        text = (
            f"Duration of each traced lap of {data.timer}, per rank (log scale). Red: slow laps "
            "traced for their slowness; orange: laps that ran an occasional section "
            "(evaluation, checkpoint). Click a step to open its waterfall below."
        )
    else:
        text = (
            f"Mean lap of {data.timer} per window and rank (log scale); give span files "
            "too for every traced lap and its waterfall."
        )
    return f'<p class="note">{escape(text)}</p>'


def _heatmap(data: ReportData) -> str:
    if len(data.per_rank) < 2:
        return '<p class="note">One rank: nothing to compare across ranks.</p>'
    sections = [
        path
        for path in sorted(data.stats, key=lambda p: -_finite(data.stats[p].total))
        if path != data.timer
    ][:HEATMAP_SECTIONS]
    excess = excess_over_median(data, sections)
    note = ""
    if len(excess) > MAX_HEATMAP_RANKS:
        ordered = sorted(excess, key=lambda r: -sum(max(0.0, v) for v in excess[r].values()))
        excess = {rank: excess[rank] for rank in ordered[:MAX_HEATMAP_RANKS]}
        note = f'<p class="note">The {MAX_HEATMAP_RANKS} ranks with the most excess are shown.</p>'
    caption = (
        '<p class="note">Mean time per lap of each section on each rank minus the median '
        "rank's: red is slower, blue faster.</p>"
    )
    return caption + svg.heatmap(excess, sections, data.timer) + note


def _finite(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _tree_table(data: ReportData) -> str:
    head = ("section", "count", "mean", "p50", "p99", "total", "% parent", "self")
    rows = []
    for order, (path, parent, depth) in enumerate(tree_paths(data.stats)):
        stats = data.stats[path]
        share = (
            100 * stats.total / data.stats[parent].total
            if parent and data.stats[parent].total > 0
            else math.nan
        )
        name = "  " * depth + (path[len(parent) + 1 :] if parent else path)
        cells = [f'<td class="path" title="{escape(path)}">{escape(name)}</td>']
        cells.append(f'<td data-v="{stats.count}">{stats.count}</td>')
        for value in (stats.mean, stats.p50, stats.p99, stats.total):
            cells.append(_number(value, format_seconds(value)))
        cells.append(_number(share, "" if math.isnan(share) else f"{share:.1f}"))
        cells.append(_number(stats.self_time, format_seconds(stats.self_time)))
        rows.append(f'<tr data-order="{order:08d}">{"".join(cells)}</tr>')
    header = "".join(f"<th>{escape(name)}</th>" for name in head)
    note = (
        '<p class="note">p50 and p99 of several windows are estimated from each window\'s '
        "quantiles. Click a column to sort; the section column restores the tree.</p>"
        if data.estimated
        else '<p class="note">Click a column to sort; the section column restores the tree.</p>'
    )
    return (
        f'<table class="sortable"><thead><tr>{header}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{note}"
    )


def _number(value: float, text: str) -> str:
    sort = -1 if math.isnan(value) else value
    return f'<td data-v="{sort:.9g}">{escape(text)}</td>'


def _initial_step(data: ReportData) -> int | None:
    """Return the step whose waterfall shows first: the slowest lap that has one."""
    if not data.waterfalls:
        return None
    laps = [lap for laps in data.laps.values() for lap in laps if lap.step in data.waterfalls]
    if not laps:
        return min(data.waterfalls)
    return max(laps, key=lambda lap: lap.seconds).step


def _waterfalls(data: ReportData, colour_of: dict[str, str]) -> str:
    if not data.waterfalls:
        return '<p class="note">No span files given: no traced step to show.</p>'
    templates = "".join(
        f'<template id="wf-{step}">{svg.waterfall(step, spans, colour_of, data.timer)}</template>'
        for step, spans in sorted(data.waterfalls.items())
    )
    note = f'<p class="note">{escape(data.waterfall_note)}</p>' if data.waterfall_note else ""
    return (
        '<p class="note">Every span of the step on every rank, each rank from its own first '
        "start of the step (host clocks differ); "
        f'hover a bar for its exact times.</p>{note}<div id="waterfall"></div>{templates}'
    )
