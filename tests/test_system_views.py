"""System figures in `looptrace summary` and `looptrace watch`, and as the reader takes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from looptrace._base.units import format_bytes
from looptrace._cli import main
from looptrace._offline.reader import SNAPSHOTS, JsonLinesFile
from looptrace._offline.watch import Watcher, view
from looptrace._offline.window_records import load_windows, snapshot_window
from looptrace._stats.system_figures import FigureStats

from .helpers.console import text_lines
from .helpers.runs import record_run
from .helpers.system_runs import Reading, record_system_run, system_block

GIB = 1 << 30
ESCAPED = "fan\\x1b[31m_rpm"  # the name `fan\x1b[31m_rpm` as every view shows it


def two_ranks(directory: Path) -> list[Path]:
    """Record two ranks of two windows; rank 0 has a GPU, rank 1 a busier, uneven CPU.

    Rank 0's process CPU reads 50, 150 | 100 (mean 100); rank 1's 300, 300 | 0 (mean 200, where
    the mean of its windows' means would be 150). Rank 0's memory: 1 GiB (the priming sample
    and two readings), then 3 GiB; rank 1's 2 GiB throughout.
    """
    return [
        record_system_run(
            directory,
            [
                [Reading(50, 25, gpus=(40.0,)), Reading(150, 75, gpus=(60.0,))],
                [Reading(100, 50, rss=3 * GIB, gpus=(90.0,))],
            ],
            rank=0,
            world_size=2,
        ),
        record_system_run(
            directory,
            [
                [Reading(300, 25, rss=2 * GIB), Reading(300, 75, rss=2 * GIB)],
                [Reading(0, 50, rss=2 * GIB)],
            ],
            rank=1,
            world_size=2,
        ),
    ]


def test_the_summary_of_two_ranks_has_the_system_block_weighted_by_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Per figure the mean of every sample, the max, and the lowest and highest rank's mean."""
    files = two_ranks(tmp_path)
    assert main(["summary", *map(str, files)]) == 0
    assert system_block(capsys.readouterr().out) == [
        "system, 2 ranks (mean and max of every sample; rank min / rank max: the lowest and "
        "highest rank's mean):",
        "  figure                       mean      max          rank min          rank max",
        "  process_cpu_percent          150%     300%     100% (rank 0)     200% (rank 1)",
        "  host_cpu_percent              50%      75%      50% (rank 0)      50% (rank 0)",
        "  host_rss_bytes            1.8 GiB  3.0 GiB  1.5 GiB (rank 0)  2.0 GiB (rank 1)",
        "  host_available_bytes      8.0 GiB  8.0 GiB  8.0 GiB (rank 0)  8.0 GiB (rank 0)",
        "  gpu0_memory_used_bytes    1.0 GiB  1.0 GiB  1.0 GiB (rank 0)  1.0 GiB (rank 0)",
        "  gpu0_utilization_percent    57.5%      90%    57.5% (rank 0)    57.5% (rank 0)",
    ]


def test_the_summary_of_one_rank_has_no_rank_columns_and_escapes_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One rank: mean and max only; a figure's name from the file is escaped as paths are."""
    file = record_system_run(
        tmp_path, [[Reading(50, 25), Reading(150, 75)]], extra={"fan\x1b[31m_rpm": 1200.0}
    )
    assert main(["summary", str(file)]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed
    assert system_block(printed) == [
        "system, rank 0 (mean and max of every sample):",
        "  figure                   mean      max",
        "  process_cpu_percent      100%     150%",
        "  host_cpu_percent          50%      75%",
        "  host_rss_bytes        1.0 GiB  1.0 GiB",
        "  host_available_bytes  8.0 GiB  8.0 GiB",
        f"  {ESCAPED}          1200     1200",
    ]


def test_the_summary_of_windows_without_system_figures_has_no_system_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No window sampled the system: not a line of it."""
    run = record_run(tmp_path)
    assert main(["summary", str(run.snapshot_file)]) == 0
    assert "system" not in capsys.readouterr().out


def test_the_reader_checks_the_system_figures(tmp_path: Path) -> None:
    """A window's figures are read as written; a malformed one skips its line with a warning."""
    file = record_system_run(tmp_path, [[Reading(50, 25)]])
    record = json.loads(file.read_text().splitlines()[0])
    assert snapshot_window(record).system == {
        "host_available_bytes": FigureStats(8 * GIB, 8 * GIB, 2),
        "host_cpu_percent": FigureStats(25.0, 25.0, 1),
        "host_rss_bytes": FigureStats(GIB, GIB, 2),
        "process_cpu_percent": FigureStats(50.0, 50.0, 1),
    }
    bad = [
        {"cpu": {"mean": "x", "max": 1.0, "samples": 1}},
        {"cpu": {"mean": 1.0, "max": 1.0, "samples": 0}},
        {"cpu": {"mean": 1.0, "max": float("inf"), "samples": 1}},
        {"cpu": [1.0]},
        [1.0],
    ]
    for value in bad:
        lines = [json.dumps(record), json.dumps({**record, "system": value, "window": 1})]
        file.write_text("".join(line + "\n" for line in lines))
        warnings: list[str] = []
        windows = load_windows(SNAPSHOTS, [JsonLinesFile(str(file), warnings.append)], print)
        assert [window.system is not None for window in windows] == [True]
        (warning,) = warnings
        assert warning.startswith(f"{file}: line 2 is a malformed {SNAPSHOTS} record (system")


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (5 * 2**20, "5.0 MiB"),
        (3 * 2**40, "3072.0 GiB"),
    ],
)
def test_sizes_read_in_binary_units(size: float, text: str) -> None:
    """Bytes below 1 KiB as they are, then KiB, MiB and GiB with one decimal."""
    assert format_bytes(size) == text


def test_watch_shows_the_latest_window_system_figures_under_the_header(tmp_path: Path) -> None:
    """One rank: CPU, host CPU, memory and each GPU of its latest window, one line."""
    file = two_ranks(tmp_path)[0]
    watcher = Watcher([str(file)], print, lambda: 0.0)
    watcher.poll()
    shown = text_lines(view(watcher.state, 0.0))
    assert shown[1] == (
        "system: cpu 100% (host 50%) · rss 3.0 GiB (8.0 GiB available) · gpu0 90% (1.0 GiB)"
    )
    assert shown[2].startswith("section")


def test_watch_shows_the_mean_of_the_ranks_latest_windows(tmp_path: Path) -> None:
    """Two ranks: each figure the mean of the ranks that have it, the ranks counted."""
    two_ranks(tmp_path)
    watcher = Watcher([str(tmp_path)], print, lambda: 0.0)
    watcher.poll()
    assert text_lines(view(watcher.state, 0.0))[1] == (
        "system (mean of 2 ranks): cpu 50% (host 50%) · rss 2.5 GiB (8.0 GiB available) · "
        "gpu0 90% (1.0 GiB)"
    )


def test_watch_without_system_figures_has_no_system_line(tmp_path: Path) -> None:
    """Windows that sampled nothing: the table follows the header at once."""
    run = record_run(tmp_path)
    watcher = Watcher([str(run.snapshot_file)], print, lambda: 0.0)
    watcher.poll()
    shown = text_lines(view(watcher.state, 0.0))
    assert shown[1].startswith("section")
    assert not any(line.startswith("system") for line in shown)
