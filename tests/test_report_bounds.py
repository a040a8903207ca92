"""The bounds of `looptrace report`'s page: one past each, the page keeps its count and says so."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from looptrace._offline.report_bounds import (
    EXTREME_RANKS,
    MAX_MARKS,
    MAX_SHARE_BARS,
    MAX_STEP_SPANS,
    MAX_SYSTEM_POINTS,
    MAX_SYSTEM_RANKS,
    MAX_SYSTEM_SERIES,
    MAX_TIMELINE_RANKS,
    MAX_WATERFALL_SPANS,
    spread_order,
)
from looptrace._offline.report_data import Lap, window_shares
from looptrace._offline.report_html import render
from looptrace._offline.report_svg import timeline
from looptrace._offline.report_system import system_section
from looptrace._offline.report_waterfalls import waterfalls
from looptrace._offline.summary import summarize_spans

from .helpers.browser import chromium, offline_page
from .helpers.report_bounds import (
    TIMER,
    laps_of,
    past_every_bound,
    report_data,
    system,
    traced_step,
    windows_at,
)

PARTS = 99  # sections of a traced step in the waterfall tests: 100 spans a step


def _text(page: str) -> str:
    """Return the visible text of a page in one line (tags dropped, entities decoded)."""
    body = re.sub(r"<(script|template)\b.*?</\1>", " ", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def test_waterfalls_past_the_span_budget_keep_the_slow_step_and_say_so() -> None:
    """One step past MAX_WATERFALL_SPANS: a step fewer, the slow lap's kept, the note counts."""
    steps = MAX_WATERFALL_SPANS // (PARTS + 1) + 1
    spans = [s for step in range(steps) for s in traced_step(0, step, PARTS, slow=None)]
    spans += traced_step(0, steps, PARTS, slow=4.0)
    shown, note = waterfalls(spans, laps_of(spans))
    assert sum(map(len, shown.values())) == MAX_WATERFALL_SPANS
    assert steps in shown and len(shown) == MAX_WATERFALL_SPANS // (PARTS + 1)
    assert note.startswith(
        f"waterfalls of {len(shown)} of {steps + 1} traced steps "
        f"({MAX_WATERFALL_SPANS:,} of {len(spans):,} spans): the steps with a slow or occasional"
    )
    fewer = [s for s in spans if s.step is not None and s.step < len(shown)]
    assert waterfalls(fewer, laps_of(fewer)) == ({step: [s for s in fewer if s.step == step]
                                                  for step in range(len(shown))}, "")  # fmt: skip


def test_a_step_past_max_step_spans_keeps_its_longest() -> None:
    """MAX_STEP_SPANS + 1 spans in one step: its shortest goes, and the note says so."""
    spans = traced_step(0, 0, MAX_STEP_SPANS)  # the lap and MAX_STEP_SPANS sections
    shown, note = waterfalls(spans, laps_of(spans))
    assert len(shown[0]) == MAX_STEP_SPANS
    assert {s.path for s in spans} - {s.path for s in shown[0]} == {f"{TIMER}.part0"}
    assert (
        note == f"a step of more than {MAX_STEP_SPANS:,} spans shows its {MAX_STEP_SPANS:,} longest"
    )


def test_the_timeline_past_max_timeline_ranks_draws_the_straggler_and_says_so() -> None:
    """MAX_TIMELINE_RANKS + 1 ranks, the last the slowest: it is drawn; the note names the rule."""
    ranks = MAX_TIMELINE_RANKS + 1
    laps = {
        rank: [Lap(step, rank, 0.1 + rank / 1000, None, "") for step in range(5)]
        for rank in range(ranks)
    }
    _, hover, note = timeline(report_data(laps))
    drawn: Any = hover["ranks"]
    assert len(drawn) == MAX_TIMELINE_RANKS and ranks - 1 in drawn
    dropped = MAX_TIMELINE_RANKS - EXTREME_RANKS  # the lowest means are the first ranks'
    assert drawn == [rank for rank in range(ranks) if rank != dropped]
    assert note == (
        f"Ranks drawn: {MAX_TIMELINE_RANKS} of {ranks}: rank 0 to rank {dropped - 1}, and the "
        f"{EXTREME_RANKS} with the highest and the {EXTREME_RANKS} with the lowest mean lap."
    )
    _, hover, note = timeline(report_data({r: laps[r] for r in range(MAX_TIMELINE_RANKS)}))
    assert hover["ranks"] == list(range(MAX_TIMELINE_RANKS)) and note == ""


def test_marks_past_max_marks_keep_the_slowest() -> None:
    """MAX_MARKS + 1 slow laps: the one least times its median is not marked, as the note says."""
    laps = {0: [Lap(step, 0, 0.1, 2.0 + step / 1e4, "") for step in range(MAX_MARKS + 1)]}
    svg, _, note = timeline(report_data(laps))
    assert svg.count('class="mark slow"') == MAX_MARKS
    assert 'data-step="0"' not in svg and f'data-step="{MAX_MARKS}"' in svg
    assert note == (
        f"{MAX_MARKS:,} of {MAX_MARKS + 1:,} slow and occasional laps are marked: the slow laps "
        "first, those most times their median first, then the longest occasional ones."
    )


def test_shares_past_max_share_bars_sum_consecutive_windows() -> None:
    """Windows at MAX_SHARE_BARS + 1 steps: bars of two steps each, and the note says so."""
    top = [f"{TIMER}.part0"]
    bars, note = window_shares(windows_at(MAX_SHARE_BARS + 1), TIMER, top)
    assert len(bars) == MAX_SHARE_BARS // 2 + 1
    assert bars[0] == ("windows at steps 10-20", {top[0]: 0.15, "other": 0.85})
    assert note == (
        f"Each bar sums the windows of 2 consecutive steps: {len(bars)} bars for the "
        f"{MAX_SHARE_BARS + 1} steps at which windows closed."
    )
    bars, note = window_shares(windows_at(MAX_SHARE_BARS), TIMER, top)
    assert len(bars) == MAX_SHARE_BARS and bars[0][0] == "window at step 10" and note == ""


def test_the_system_table_past_max_system_ranks_keeps_the_extremes() -> None:
    """MAX_SYSTEM_RANKS + 1 ranks of a figure: that many rows less one, the highest mean kept."""
    ranks = MAX_SYSTEM_RANKS + 1
    section = system_section(system(ranks, 1, 3))
    rows = [int(row.rank) for row in section.rows]
    assert len(rows) == MAX_SYSTEM_RANKS and ranks - 1 in rows and 0 in rows
    assert f"(process_cpu_percent: {MAX_SYSTEM_RANKS} of {ranks}: rank 0 to" in section.table_note
    assert system_section(system(MAX_SYSTEM_RANKS, 1, 3)).table_note == ""


def test_a_system_chart_past_max_system_series_draws_that_many_lines() -> None:
    """MAX_SYSTEM_SERIES + 1 lines: that many drawn and named, the note says which."""
    chart = system_section(system(1, MAX_SYSTEM_SERIES + 1, 3)).cpu
    assert chart is not None
    assert chart.svg.count('class="system-line"') == MAX_SYSTEM_SERIES
    assert chart.note.startswith(f"Lines drawn: {MAX_SYSTEM_SERIES} of {MAX_SYSTEM_SERIES + 1}: ")
    assert "more" not in chart.legend


def test_a_system_chart_past_max_system_points_is_down_sampled() -> None:
    """One line of MAX_SYSTEM_POINTS + 1 windows: the min and max per bucket, as the note says."""
    chart = system_section(system(1, 1, MAX_SYSTEM_POINTS + 1)).cpu
    assert chart is not None
    line = re.search(r'class="system-line"[^>]*points="([^"]*)"', chart.svg)
    assert line is not None
    drawn = len(line[1].split())
    assert drawn <= MAX_SYSTEM_POINTS
    assert chart.note == (
        f"Down-sampled: {drawn:,} of {MAX_SYSTEM_POINTS + 1:,} windows drawn, the lowest and "
        "highest of each bucket of steps."
    )
    assert system_section(system(1, 1, MAX_SYSTEM_POINTS)).cpu.note == ""  # type: ignore[union-attr]


def test_many_ranks_are_described_as_runs() -> None:
    """Past 16 ranks the description names runs of ranks, not every one."""
    spans = [s for rank in [*range(20), 30] for s in traced_step(rank, 0, 1)]
    assert "21 ranks (0-19, 30)" in summarize_spans(spans).description
    assert "2 ranks (0, 1)" in summarize_spans(spans[:4]).description


def test_spread_order_covers_the_range_first() -> None:
    """Any first part of the order is spread over the whole range."""
    assert spread_order(list(range(8))) == [0, 4, 2, 6, 1, 5, 3, 7]
    assert sorted(spread_order(list(range(11)))) == list(range(11))


def test_a_page_over_every_bound_says_what_it_left_out() -> None:
    """Every part past its bound: every note is on the page, in its text."""
    text = _text(render(past_every_bound(), "test"))
    for note in ("waterfalls of ", "Ranks drawn: ", "slow and occasional laps are marked",
                 "Each bar sums the windows of 2", "Rows per figure: ", "Lines drawn: ",
                 "Down-sampled: ", f"shows its {MAX_STEP_SPANS:,} longest",
                 "each waterfall shows the 16 ranks slowest"):  # fmt: skip
        assert note in text


@pytest.fixture(scope="module")
def browser() -> Any:
    """Yield a headless Chromium (the system's; never a downloaded one)."""
    with chromium() as launched:
        yield launched


@pytest.mark.slow
def test_a_page_over_every_bound_in_chromium(browser: Any, tmp_path: Path) -> None:
    """Over every bound: no request, no console error; the charts render, a mark opens its step."""
    output = tmp_path / "report.html"
    output.write_text(render(past_every_bound(), "test"), encoding="utf-8")
    url = output.as_uri()
    page, errors, requests = offline_page(browser, url)
    page.goto(url, wait_until="load")
    text = " ".join(page.inner_text("body").split())
    assert "Ranks drawn: 32 of " in text and "Lines drawn: " in text
    assert page.locator("circle.mark").count() == MAX_MARKS
    assert page.locator("#timeline polyline.lap-line").count() == MAX_TIMELINE_RANKS
    assert page.locator("#system-table tbody tr").count() == MAX_SYSTEM_RANKS
    for chart in ("#timeline", "#shares", "#system-cpu", "#waterfall svg"):
        box = page.locator(chart).first.bounding_box()
        assert box is not None and box["width"] > 500 and box["height"] > 100
    mark = page.locator("circle.mark.slow").first
    step = mark.get_attribute("data-step")
    mark.click()
    assert page.inner_text("#wf-title") == f"step {step}"
    assert errors == []
    assert requests == [url]
    page.close()
