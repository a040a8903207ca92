"""The System section of `looptrace report`: its table and charts, as text and in Chromium."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from looptrace._cli import main
from looptrace._offline.report_data import load_report

from .helpers.browser import chromium, offline_page
from .helpers.runs import record_run
from .helpers.system_runs import Reading, record_system_run

GIB = 1 << 30


def two_ranks(directory: Path) -> list[Path]:
    """Record two ranks of three windows; rank 0 has two GPUs, rank 1 none."""
    return [
        record_system_run(
            directory,
            [
                [Reading(50, 25, gpus=(40.0, 10.0)), Reading(150, 75, gpus=(60.0, 30.0))],
                [Reading(100, 50, rss=3 * GIB, gpus=(90.0, 20.0))],
                [Reading(50, 40, gpus=(70.0, 0.0))],
            ],
            rank=0,
            world_size=2,
        ),
        record_system_run(
            directory,
            [[Reading(300, 25), Reading(300, 75)], [Reading(0, 50)], [Reading(200, 60)]],
            rank=1,
            world_size=2,
        ),
    ]


def _report(capsys: pytest.CaptureFixture[str], output: Path, *inputs: Path) -> str:
    """Write the report of `inputs`; return the page."""
    assert main(["report", *map(str, inputs), "-o", str(output)]) == 0
    assert capsys.readouterr().err == ""
    return output.read_text()


def _text(page: str) -> str:
    """Return the visible text of a page in one line (tags dropped, entities decoded)."""
    body = re.sub(r"<(script|template)\b.*?</\1>", " ", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def test_the_report_data_holds_each_rank_figures_and_series(tmp_path: Path) -> None:
    """Per figure each rank's mean and max; CPU per rank, GPU per rank and device, by step."""
    two_ranks(tmp_path)
    system = load_report([str(tmp_path)], print).system
    assert system is not None
    cpu = next(figure for figure in system.figures if figure.name == "process_cpu_percent")
    assert {rank: (s.mean, s.max, s.samples) for rank, s in cpu.ranks.items()} == {
        0: (87.5, 150.0, 4),
        1: (200.0, 300.0, 4),
    }
    assert system.cpu == {
        "rank 0": [(2, 100.0), (3, 100.0), (4, 50.0)],
        "rank 1": [(2, 300.0), (3, 0.0), (4, 200.0)],
    }
    assert system.gpu == {
        "rank 0 gpu0": [(2, 140 / 3), (3, 90.0), (4, 70.0)],
        "rank 0 gpu1": [(2, 50 / 3), (3, 20.0), (4, 0.0)],
    }


def test_the_page_has_the_system_table_and_a_point_per_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row per figure and rank; each chart a dot per window of each of its series."""
    page = _report(capsys, tmp_path / "report.html", *two_ranks(tmp_path))
    text = _text(page)
    assert "System Figures sampled while the windows ran" in text
    assert "figure rank mean max samples process_cpu_percent 0 87.5% 150% 4" in text
    assert "process_cpu_percent 1 200% 300% 4" in text
    assert "host_rss_bytes 0 1.4 GiB 3.0 GiB 5" in text
    assert "gpu1_utilization_percent 0 14% 30% 5" in text
    cpu, gpu = (page[page.index(f'id="system-{name}"') :] for name in ("cpu", "gpu"))
    assert cpu[: cpu.index("</svg>")].count('class="system-point"') == 6
    assert gpu[: gpu.index("</svg>")].count('class="system-point"') == 6
    assert "<title>rank 1, step 3: 0%</title>" in page
    assert "rank 0 gpu1" in text


def test_the_page_without_system_figures_has_no_system_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Windows that sampled nothing: no System heading, table or chart."""
    run = record_run(tmp_path)
    page = _report(capsys, tmp_path / "report.html", run.snapshot_file)
    assert "<h2>System</h2>" not in page
    assert "system-point" not in page and 'id="system-table"' not in page


def test_a_run_without_gpus_has_the_cpu_chart_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No GPU figure sampled: the CPU chart and no GPU chart."""
    file = record_system_run(tmp_path, [[Reading(50, 25)], [Reading(70, 25)]])
    page = _report(capsys, tmp_path / "report.html", file)
    assert 'id="system-cpu"' in page
    assert 'id="system-gpu"' not in page


@pytest.fixture(scope="module")
def browser() -> Any:
    """Yield a headless Chromium (the system's; never a downloaded one)."""
    with chromium() as launched:
        yield launched


@pytest.mark.slow
def test_the_system_section_in_chromium(
    browser: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No request, no console error; the section's text, its charts' points, a sortable table."""
    output = tmp_path / "report.html"
    _report(capsys, output, *two_ranks(tmp_path))
    url = output.as_uri()
    page, errors, requests = offline_page(browser, url)
    page.goto(url, wait_until="load")
    text = " ".join(page.inner_text("body").split())
    assert "System Figures sampled while the windows ran" in text
    assert "Mean process CPU of each window, per rank." in text
    assert page.locator("#system-cpu circle.system-point").count() == 6
    assert page.locator("#system-gpu circle.system-point").count() == 6
    assert page.locator("#system-cpu polyline.system-line").count() == 2
    box = page.locator("#system-cpu").bounding_box()
    assert box is not None and box["width"] > 500 and box["height"] > 100
    page.click("#system-table th:nth-child(4)")  # max, ascending
    first = page.inner_text("#system-table tbody tr:first-child")
    assert first.split("\t")[:2] == ["gpu1_utilization_percent", "0"]  # its max: 30%
    page.click("#system-table th:nth-child(1)")  # the figure column restores the order
    first = page.inner_text("#system-table tbody tr:first-child")
    assert first.split("\t")[:2] == ["process_cpu_percent", "0"]
    assert errors == []
    assert requests == [url]
    page.close()
