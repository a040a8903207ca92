"""Inputs of `looptrace report` just over each of its page's bounds (`report_bounds`).

Records built directly (no files): traced steps as span records, laps, windows and system
series, sized from the bounds' constants so that each test goes one past the bound it pins.
"""

from __future__ import annotations

from looptrace._base.attributes import SLOW_LAP
from looptrace._offline.report_bounds import (
    MAX_MARKS,
    MAX_SHARE_BARS,
    MAX_STEP_SPANS,
    MAX_SYSTEM_POINTS,
    MAX_SYSTEM_RANKS,
    MAX_SYSTEM_SERIES,
    MAX_TIMELINE_RANKS,
    MAX_WATERFALL_SPANS,
)
from looptrace._offline.report_data import Lap, ReportData, window_shares
from looptrace._offline.report_waterfalls import MAX_WATERFALL_RANKS, waterfalls
from looptrace._offline.span_record import SpanRecord
from looptrace._offline.system_view import Figure, SystemSeries
from looptrace._offline.window_records import Window
from looptrace._stats.snapshot import SectionStats
from looptrace._stats.system_figures import FigureStats

TIMER = "root.t"
MS = 1_000_000


def traced_step(rank: int, step: int, parts: int, *, slow: float | None = None) -> list[SpanRecord]:
    """Return one rank's spans of a traced step: the lap and `parts` sections, part i i+1 ms."""
    start = step * 10_000 * MS
    ids = f"{rank:06x}{step:08x}"
    lap_ns = sum(range(1, parts + 1)) * MS
    attributes: dict[str, object] = {} if slow is None else {SLOW_LAP: slow}
    spans = [
        _span(
            f"{ids}0000",
            "",
            TIMER,
            rank=rank,
            step=step,
            start=start,
            length=lap_ns,
            attributes=attributes,
        )
    ]
    at = start
    for part in range(parts):
        path = f"{TIMER}.part{part}"
        spans.append(
            _span(
                f"{ids}{part + 1:04x}",
                f"{ids}0000",
                path,
                rank=rank,
                step=step,
                start=at,
                length=(part + 1) * MS,
                attributes={},
            )
        )
        at += (part + 1) * MS
    return spans


def _span(
    span_id: str, parent: str, path: str, *, rank: int, step: int, start: int, length: int,
    attributes: dict[str, object],
) -> SpanRecord:  # fmt: skip
    return SpanRecord(
        trace_id=f"{rank:016x}{step:016x}", span_id=span_id, parent_id=parent,
        name=path.rsplit(".", 1)[-1], path=path, start_ns=start, end_ns=start + length,
        rank=rank, step=step, thread_id=None, thread_name=None, host=None, error=False,
        attributes=dict(attributes),
    )  # fmt: skip


def laps_of(spans: list[SpanRecord]) -> dict[int, list[Lap]]:
    """Return the laps of the timer per rank, as the report reads them from spans."""
    laps: dict[int, list[Lap]] = {}
    for span in spans:
        if span.path == TIMER and span.step is not None:
            slow = span.attributes.get(SLOW_LAP)
            lap = Lap(span.step, span.rank, span.duration_ns / 1e9,
                      float(slow) if isinstance(slow, float) else None, "")  # fmt: skip
            laps.setdefault(span.rank, []).append(lap)
    return {rank: sorted(found, key=lambda lap: lap.step) for rank, found in sorted(laps.items())}


def report_data(laps: dict[int, list[Lap]], **fields: object) -> ReportData:
    """Return report data of these laps (and `fields`), nothing else."""
    data = ReportData(
        files=[], description="", timer=TIMER, stats={}, per_rank={}, estimated=False,
        windows=0, laps=laps, window_means={}, shares=[], top=[],
    )  # fmt: skip
    for name, value in fields.items():
        setattr(data, name, value)
    return data


def stats(count: int, total: float) -> SectionStats:
    """Return statistics of `count` laps of `total` seconds, each the same."""
    mean = total / count
    return SectionStats(count, total, mean, mean, mean, 0.0, mean, mean, mean, total, 0, ())


def windows_at(steps: int) -> list[Window]:
    """Return one rank's windows closed at steps 10, 20, ...: 10 laps of 1 s, part0 a tenth."""
    return [
        Window(rank=0, step=10 * (i + 1), host=None,
               stats={TIMER: stats(10, 10.0), f"{TIMER}.part0": stats(10, 1.0 + i % 3)})
        for i in range(steps)
    ]  # fmt: skip


def system(ranks: int, series: int, points: int) -> SystemSeries:
    """Return one figure of `ranks` ranks (rank r's mean r%), `series` CPU lines of `points`."""
    ranks_stats = {rank: FigureStats(float(rank), float(rank), 1) for rank in range(ranks)}
    figure = Figure("process_cpu_percent", ranks / 2, ranks - 1.0, ranks, ranks_stats)
    cpu = {
        f"rank {line}": [(step, float(line + step % 5)) for step in range(points)]
        for line in range(series)
    }
    return SystemSeries(figures=[figure], cpu=cpu, gpu={})


def past_every_bound() -> ReportData:
    """Return report data over every bound of the page at once (one past each)."""
    ranks = max(MAX_TIMELINE_RANKS, MAX_WATERFALL_RANKS) + 1
    per_step = MAX_WATERFALL_RANKS * 16  # spans kept of a step: 16 a rank
    steps = MAX_WATERFALL_SPANS // per_step + 1
    spans = [
        span
        for step in range(steps)
        for rank in range(ranks)
        for span in traced_step(rank, step, 15, slow=2.0 + rank / 100 if rank % 2 else None)
    ]
    spans += traced_step(0, steps, MAX_STEP_SPANS, slow=9.0)  # one step past its own bound
    laps = laps_of(spans)
    extra = MAX_MARKS + 1 - sum(lap.slow is not None for found in laps.values() for lap in found)
    laps[ranks] = [Lap(1000 + i, ranks, 0.2, 3.0, "") for i in range(max(1, extra))]
    shares, shares_note = window_shares(windows_at(MAX_SHARE_BARS + 1), TIMER, [f"{TIMER}.part0"])
    data = report_data(laps, shares=shares, shares_note=shares_note, top=[f"{TIMER}.part0"])
    data.waterfalls, data.waterfall_note = waterfalls(spans, laps)
    data.system = system(MAX_SYSTEM_RANKS + 1, MAX_SYSTEM_SERIES + 1,
                         MAX_SYSTEM_POINTS // MAX_SYSTEM_SERIES + 1)  # fmt: skip
    return data
