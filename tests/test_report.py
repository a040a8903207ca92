"""`looptrace report`: one self-contained HTML page, checked as text and in a real Chromium."""

from __future__ import annotations

import html
import re
import time
from pathlib import Path
from typing import Any

import pytest

from looptrace import RankInfo, configure
from looptrace._cli import main
from looptrace._demo import run_demo
from looptrace._offline.reader import open_inputs
from looptrace._offline.report_data import Lap, ReportData, load_report
from looptrace._offline.report_svg import MAX_POINTS, segments, timeline
from looptrace._offline.span_records import load_spans
from looptrace.testing import FakeClock, capture

from .helpers.browser import chromium, offline_page
from .helpers.runs import record_run

DEMO_FINDING = (  # the demo's checkpoint and eval sections have their roles by their names
    "Diagnosis findings critical outside_laps: 37% of the window's 17.942 s goes to other work "
    "than root.training's steps (root.training.checkpoint 3.713 s, root.training.eval 2.980 s) "
    "(3 of 3 windows) try: evaluate or checkpoint less often, or make that work cheaper"
)


def _report(capsys: pytest.CaptureFixture[str], output: Path, *inputs: object) -> str:
    assert main(["report", *map(str, inputs), "-o", str(output)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def _text(page: str) -> str:
    """Return the visible text of a page (tags dropped, entities decoded)."""
    body = re.sub(r"<(script|template)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """Return a directory with the span and snapshot files of a 300-step demo."""
    run_demo(steps=300, directory=tmp_path / "demo")
    return tmp_path / "demo"


def test_a_directory_of_demo_files_makes_one_self_contained_page(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory of span and snapshot files: a page with no external reference."""
    output = tmp_path / "report.html"
    out = _report(capsys, output, demo)
    assert out == (
        f"wrote {output} ({output.stat().st_size / 1e6:.2f} MB): 3 windows, rank 0, steps 0-299; "
        "2109 spans of 300 traced steps; 1 rank, 300 waterfalls\n"
    )
    page = output.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "@import" not in page and "url(" not in page
    text = _text(page)
    for section in ("backward", "checkpoint", "eval", "encoder", "decoder", "optimizer"):
        assert section in text
    assert "300 laps of root.training" in " ".join(text.split())
    assert page.count("<template id=") == 300
    assert DEMO_FINDING in " ".join(text.split())


def test_two_ranks_show_both_and_their_excess_over_the_median(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Span and snapshot files of two ranks: both ranks, a heatmap cell per rank and section."""
    runs = [
        record_run(tmp_path, rank=r, world_size=2, data_ms=[10 * (r + 1)] * 6, forward_ms=30)
        for r in range(2)
    ]
    output = tmp_path / "report.html"
    out = _report(
        capsys, output, *(run.span_file for run in runs), *(run.snapshot_file for run in runs)
    )
    assert "2 ranks (0, 1)" in out
    page = output.read_text()
    cells = re.findall(r"<title>(rank \d, [a-z]+: [^<]+)</title>", page)
    assert "rank 1, data: +5 ms per lap over the median rank" in cells
    assert "rank 0, data: -5 ms per lap over the median rank" in cells


def test_snapshot_files_alone_give_window_means_and_no_waterfall(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without span files the timeline shows each window's mean lap; no step to open."""
    output = tmp_path / "report.html"
    out = _report(capsys, output, demo / "snapshots.jsonl")
    assert out.endswith("3 windows, rank 0, steps 0-299; 1 rank, 0 waterfalls\n")
    text = " ".join(_text(output.read_text()).split())
    assert "Mean lap of root.training per window and rank" in text
    assert "No span files given: no traced step to show." in text


def test_the_findings_are_those_summary_prints_and_need_snapshot_files(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page lists the findings `looptrace summary` prints; span files alone say why none."""
    assert main(["summary", str(demo / "snapshots.jsonl")]) == 0
    [line] = [
        line.strip() for line in capsys.readouterr().out.splitlines() if "input_bound" in line
    ]
    output = tmp_path / "report.html"
    _report(capsys, output, demo / "snapshots.jsonl")
    text = " ".join(_text(output.read_text()).split())
    assert " ".join(line.replace("; try:", " try:").split()) in text
    _report(capsys, output, demo / "spans.jsonl")
    text = " ".join(_text(output.read_text()).split())
    assert "Diagnosis findings No snapshot file given: the diagnosis of each window" in text
    assert "input_bound" not in text


def test_refuses_to_overwrite_an_input(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An output that is one of the inputs is an error; the input stays as it was."""
    spans = demo / "spans.jsonl"
    before = spans.read_bytes()
    assert main(["report", str(demo), "-o", str(spans)]) == 1
    assert capsys.readouterr().err == (
        f"looptrace report: error: {spans}: is one of the input files; choose another output\n"
    )
    assert spans.read_bytes() == before


def test_bad_files_get_one_line_warnings_and_the_rest_is_reported(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A foreign file, an empty one and a truncated last line: warnings; the page is written."""
    foreign = tmp_path / "other.jsonl"
    foreign.write_text('{"hello": 1}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    snapshots = demo / "snapshots.jsonl"
    with snapshots.open("a") as handle:
        handle.write('{"kind": "looptrace.snap')
    output = tmp_path / "report.html"
    assert main(["report", str(demo), str(foreign), str(empty), "-o", str(output)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"looptrace report: warning: {foreign}: not a looptrace span, snapshot or metrics "
        "file (line 1 has keys: hello); skipped",
        f"looptrace report: warning: {empty}: empty; skipped",
        f"looptrace report: warning: {snapshots}: line 4 is truncated (a writer killed "
        "mid-line?); skipped",
    ]
    assert "root.training" in output.read_text()


def test_nothing_readable_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only an empty file: one error line, no page."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    output = tmp_path / "report.html"
    assert main(["report", str(empty), "-o", str(output)]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"looptrace report: error: no readable records in {empty}"
    )
    assert not output.exists()


def test_a_long_timeline_is_down_sampled_and_keeps_its_slow_step() -> None:
    """Beyond MAX_POINTS laps the min and max of each bucket are drawn, and the page says so."""
    laps = [
        Lap(step=i, rank=0, seconds=0.5 if i == 77_777 else 0.1 + (i % 7) * 1e-3, slow=None,
            occasional="")
        for i in range(100_000)
    ]  # fmt: skip
    data = ReportData(
        files=[], description="", timer="root.t", stats={}, per_rank={}, estimated=False,
        windows=0, laps={0: laps}, window_means={}, shares=[], top=[],
    )  # fmt: skip
    _, hover, note = timeline(data)
    points: Any = hover["points"]
    assert len(points["0"]) <= MAX_POINTS
    assert (77_777, 0.5) in points["0"]
    assert note.startswith(f"The timeline is down-sampled: {len(points['0']):,} of 100,000 laps")


def _traced(steps: list[int], run_steps: tuple[int, int] | None) -> ReportData:
    """Return report data whose rank 0 traced `steps` (100 ms each) of a run of `run_steps`."""
    laps = [Lap(step=i, rank=0, seconds=0.1, slow=None, occasional="") for i in steps]
    return ReportData(
        files=[], description="", timer="root.t", stats={}, per_rank={}, estimated=False,
        windows=0, laps={0: laps}, window_means={}, shares=[], top=[], run_steps=run_steps,
    )  # fmt: skip


def test_the_timeline_axis_covers_the_run_not_only_its_traced_steps() -> None:
    """Steps 40-60 traced of a run of steps 0-199: the axis runs from 0 to 199."""
    svg, _, _ = timeline(_traced(list(range(40, 61)), (0, 199)))
    assert re.findall(r'data-(first|last)="(\d+)"', svg) == [("first", "0"), ("last", "199")]
    svg, _, _ = timeline(_traced(list(range(40, 61)), None))  # span files alone: what they hold
    assert re.findall(r'data-(first|last)="(\d+)"', svg) == [("first", "40"), ("last", "60")]


def test_traced_steps_far_apart_are_not_joined_by_a_line() -> None:
    """Runs of traced steps become separate lines; a lone traced step a dot."""
    steps = [0, 10, 20, 30, 500, 510, 520, 900]
    assert [[p[0] for p in segment] for segment in segments([(i, 0.1) for i in steps])] == [
        [0, 10, 20, 30],
        [500, 510, 520],
        [900],
    ]
    svg, _, _ = timeline(_traced(steps, None))
    assert (svg.count('class="lap-line"'), svg.count('class="lap-dot"')) == (2, 1)


# The browser: Debian's Chromium driven by Playwright, with every request but the page refused.


@pytest.fixture(scope="module")
def browser() -> Any:
    """Yield a headless Chromium (the system's; never a downloaded one)."""
    with chromium() as launched:
        yield launched


@pytest.mark.slow
def test_the_demo_report_in_chromium(
    browser: Any, demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Offline: no request, no console error; sections as text; a click opens the waterfall."""
    output = tmp_path / "report.html"
    _report(capsys, output, demo)
    url = output.as_uri()
    page, errors, requests = offline_page(browser, url)
    started = time.monotonic()
    page.goto(url, wait_until="load")
    assert time.monotonic() - started < 60  # a hang guard, not a speed claim
    text = page.inner_text("body")
    for section in ("root.training.backward", "root.training.checkpoint", "encoder", "rank (0)"):
        assert section in text
    assert DEMO_FINDING.replace("Diagnosis findings ", "") in " ".join(text.split())

    spans = load_spans(open_inputs([str(demo / "spans.jsonl")], print)[1], print)
    mark = page.locator("circle.mark").first
    step = int(mark.get_attribute("data-step"))
    mark.click()
    assert page.inner_text("#wf-title") == f"step {step}"
    shown = page.eval_on_selector_all(
        "#waterfall .span-name", "nodes => nodes.map(n => n.textContent)"
    )
    expected = sorted(f"r{s.rank} {s.name}" for s in spans if s.step == step)
    assert sorted(" ".join(name.split()) for name in shown) == expected
    assert "eval" in {s.name for s in spans if s.step == step} or "checkpoint" in {
        s.name for s in spans if s.step == step
    }

    page.hover("#timeline", position={"x": 300, "y": 120})
    assert re.match(r"rank 0  step \d+  \d", page.inner_text("#tip"))
    page.click("table.sortable th:nth-child(8)")  # self time, ascending
    first = page.inner_text("table.sortable tbody tr:first-child td:first-child")
    assert first.strip() in {"root.training", "forward"}  # the two with no self time

    shot = tmp_path / "report.png"
    page.mouse.move(0, 0)
    page.screenshot(path=str(shot), full_page=True)
    assert _colours(shot) > 50
    assert errors == []
    assert requests == [url]
    page.close()


def _record_with_a_stall(directory: Path) -> None:
    """Record 2 ranks of 30 steps, every 5th traced; rank 1 stalls 0.5 s in step 13's data."""
    for rank in range(2):
        clock = FakeClock(start_s=0.0)
        lt = configure(
            "looptrace-test",
            clock=clock,
            rank=RankInfo(rank=rank, world_size=2),
            trace_every=5,
            trace_file=directory / "spans.jsonl",
            snapshot_file=directory / "snapshots.jsonl",
        )
        train = lt.timer("training")
        for step in range(30):
            train.record("data")
            clock.advance(0.01 + (0.5 if (rank, step) == (1, 13) else 0.0))
            train.record("forward")
            clock.advance(0.03)
            if step < 29:
                train.record()
            else:
                train.stop()
            if step % 10 == 9:
                lt.reset()
        lt.shutdown()


@pytest.mark.slow
def test_a_slow_lap_of_one_rank_opens_its_waterfall_in_chromium(
    browser: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two ranks, a lap traced for its slowness: its mark opens that rank's spans of the step."""
    _record_with_a_stall(tmp_path)
    output = tmp_path / "report.html"
    _report(capsys, output, tmp_path)
    url = output.as_uri()
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.route(
        "**/*", lambda route: route.continue_() if route.request.url == url else route.abort()
    )
    page.goto(url, wait_until="load")
    assert "rank 0" in page.inner_text("body") and "rank 1" in page.inner_text("body")
    slow = page.locator("circle.mark.slow")
    assert slow.count() == 1
    assert (slow.get_attribute("data-step"), slow.get_attribute("data-rank")) == ("13", "1")
    slow.click()
    assert page.inner_text("#wf-title") == "step 13"
    shown = page.eval_on_selector_all(
        "#waterfall .span-name", "nodes => nodes.map(n => n.textContent)"
    )
    assert [" ".join(name.split()) for name in shown] == ["r1 training", "r1 data", "r1 forward"]
    assert errors == []
    page.close()


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return the directory of the span and snapshot files of a real 2-rank gloo job."""
    pytest.importorskip("torch.distributed", reason="needs torch (the test extra)")
    from .helpers import gloo_files

    directory = tmp_path_factory.mktemp("gloo")
    gloo_files.run(directory / "out", directory / "store")
    return directory / "out"


@pytest.mark.slow
def test_the_report_of_a_two_rank_gloo_job_in_chromium(
    browser: Any, gloo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ranks, sections and findings as text; the slow step 13 opens both ranks' spans of it."""
    output = tmp_path / "report.html"
    out = _report(capsys, output, gloo_run)
    assert "6 windows, 2 ranks (0, 1), steps 0-29; 56 spans of 7 traced steps" in out
    url = output.as_uri()
    page, errors, requests = offline_page(browser, url)
    page.goto(url, wait_until="load")
    text = " ".join(page.inner_text("body").split())
    assert "2 ranks (0, 1) 30 laps of root.training 6 windows" in text
    for section in ("root.training.forward", "root.training.backward", "root.training.data"):
        assert section in text
    assert "Diagnosis findings critical straggler: rank 1 makes the others wait" in text
    assert "over the typical rank; cause root.training.forward (2 of 6 windows)" in text
    assert "input_bound" not in text  # one slow loader of two ranks is rank 1's straggler
    assert "slow_steps" not in text  # step 13's stall, in one window only, is a burst (info)

    slow = page.locator("circle.mark.slow")
    marks = [(slow.nth(i).get_attribute("data-step"), slow.nth(i).get_attribute("data-rank"))
             for i in range(slow.count())]  # fmt: skip
    assert marks == [("13", "0"), ("13", "1")]  # rank 0 waited for rank 1's stall
    slow.last.click()  # the marks coincide: the top one takes the click
    assert page.inner_text("#wf-title") == "step 13"
    bars = page.eval_on_selector_all("#waterfall title", "nodes => nodes.map(n => n.textContent)")
    assert bars == [
        "rank 0 root.training: 620 ms, starts at +0 ns",
        "rank 0 root.training.data: 10 ms, starts at +0 ns",
        "rank 0 root.training.forward: 60 ms, starts at +10 ms",
        "rank 0 root.training.backward: 550 ms, starts at +70 ms",
        "rank 1 root.training: 620 ms, starts at +0 ns",
        "rank 1 root.training.data: 510 ms, starts at +0 ns",
        "rank 1 root.training.forward: 80 ms, starts at +510 ms",
        "rank 1 root.training.backward: 30 ms, starts at +590 ms",
    ]
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert _colours(shot) > 50
    assert errors == []
    assert requests == [url]
    page.close()


def _colours(png: Path) -> int:
    """Return the number of distinct colours of a PNG (every 3rd pixel)."""
    from matplotlib.image import imread

    pixels = imread(png)
    return len({tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::3].tolist()})


def test_the_wall_time_and_steps_per_second_come_from_the_windows(tmp_path: Path) -> None:
    """100 steps of 0.1 s, 5 traced: the page's wall time is the windows' 10 s, not the spans'."""
    cap = capture(
        clock=FakeClock(start_s=0.0),
        trace_every=50,
        snapshot_file=tmp_path / "snapshots.jsonl",
        trace_file=tmp_path / "spans.jsonl",
    )
    train = cap.lt.timer("train")
    for step in range(100):
        train.record()
        train.record("forward")
        cap.clock.advance(0.1)
        if step % 25 == 24:
            cap.lt.reset()
    train.stop()
    cap.lt.shutdown()
    data = load_report([str(tmp_path)], lambda _message: None)
    assert data.wall_s == pytest.approx(10.0)
    assert data.steps == 100


def test_the_glance_shows_samples_per_second_and_peak_memory(tmp_path: Path) -> None:
    """A run counting 32 samples a step of 0.1 s: 320 samples per second, and its peak memory."""
    cap = capture(clock=FakeClock(start_s=0.0), snapshot_file=tmp_path / "snapshots.jsonl")
    train = cap.lt.timer("train")
    for step in range(20):
        train.record()
        train.count("samples", 32)
        train.record("forward")
        cap.clock.advance(0.1)
        if step % 10 == 9:
            cap.lt.reset()
    train.stop()
    cap.lt.shutdown()
    data = load_report([str(tmp_path)], lambda _message: None)
    assert data.rates == {"samples": pytest.approx(320.0)}
    assert data.memory is not None
    assert data.memory[1] == "host peak"
