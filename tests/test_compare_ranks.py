"""`looptrace compare` resamples ranks (their windows summed), or blocks of one rank's windows."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from looptrace._cli import main
from looptrace._offline.compare import _main_timer
from looptrace._offline.report_data import main_timer
from looptrace._offline.resample import Resampler, block_length, units
from looptrace._offline.summary import merge_windows
from looptrace._offline.window_records import Window
from looptrace._stats.snapshot import SectionStats

from .helpers.runs import record_run

RANKS = 8
FORWARD = "root.training.forward"


def _job(
    directory: Path,
    forward_ms: Callable[[int], float],
    *,
    ranks: int = RANKS,
    windows: int = 4,
    repeat: int = 1,
) -> Path:
    """Record `ranks` ranks of `windows` windows (two steps each), the windows `repeat` times."""
    directory.mkdir()
    for rank in range(ranks):
        rng = random.Random(rank)
        data = [rng.uniform(17, 23) for _ in range(2 * windows)] * repeat
        record_run(
            directory, rank=rank, world_size=ranks, data_ms=data, forward_ms=forward_ms(rank)
        )
    return directory


def _paths(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, dict[str, Any]]:
    code = main(["compare", *map(str, args), "--json"])
    result = json.loads(capsys.readouterr().out)
    return code, {entry["path"]: entry for entry in result["paths"]}


def test_a_regression_of_one_section_across_8_ranks_is_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A forward 20 % slower on each of 8 ranks (50-57 ms): flagged, the interval above 0."""
    base = _job(tmp_path / "base", lambda rank: 50 + rank)
    cand = _job(tmp_path / "cand", lambda rank: 1.2 * (50 + rank))
    code, paths = _paths(capsys, base, cand, "--max-regression", "10")
    assert code == 1
    forward = paths[FORWARD]
    assert forward["flagged"] is True
    assert forward["p50_change_pct"] == pytest.approx(20.0)
    assert 0 < forward["p50_low_pct"] < 20 < forward["p50_high_pct"]
    assert forward["base_ranks"] == forward["cand_ranks"] == RANKS
    assert forward["base_windows"] == forward["cand_windows"] == RANKS * 4
    assert paths["root.training.data"]["flagged"] is False


def test_the_same_files_compared_with_themselves_change_by_zero_and_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job compared with itself: every change 0, every interval around 0, exit 0."""
    job = _job(tmp_path / "job", lambda rank: 50 + rank)
    code, paths = _paths(capsys, job, job, "--max-regression", "5")
    assert code == 0
    for entry in paths.values():
        assert entry["flagged"] is False
        assert entry["p50_change_pct"] == 0.0
        assert entry["share_change_pp"] == 0.0
        assert entry["p50_low_pct"] <= 0 <= entry["p50_high_pct"]
        assert entry["share_low_pp"] <= 0 <= entry["share_high_pp"]


def test_a_one_rank_run_gets_an_interval_from_blocks_of_its_windows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One process, 12 windows a side: a finite interval around the change, ranks 1."""
    base = _job(tmp_path / "base", lambda _: 50, ranks=1, windows=12)
    (tmp_path / "cand").mkdir()
    rng = random.Random(99)
    data_ms = [rng.uniform(17, 23) for _ in range(24)]
    cand = record_run(tmp_path / "cand", data_ms=data_ms).snapshot_file
    _, paths = _paths(capsys, base, cand)
    data = paths["root.training.data"]
    assert data["base_ranks"] == data["cand_ranks"] == 1
    assert data["base_windows"] == data["cand_windows"] == 12
    assert data["p50_low_pct"] < data["p50_change_pct"] < data["p50_high_pct"]
    assert data["share_low_pp"] < data["share_change_pp"] < data["share_high_pp"]


def test_one_rank_s_windows_are_drawn_in_moving_blocks_of_their_cube_root() -> None:
    """27 windows: 25 moving blocks of 3 (their sums), 9 drawn a resample; 2 windows: of 1."""
    values = [float(v) for v in range(27)]
    blocks = units([values])
    assert blocks is not None
    assert (block_length(27), blocks.draws, blocks.ranks) == (3, 9, 1)
    assert blocks.sums == [3.0 * v + 3 for v in range(25)]
    assert blocks.counts == [3] * 25
    assert [block_length(n) for n in (2, 3, 7, 8, 64, 1000)] == [1, 1, 2, 2, 4, 10]
    assert units([[1.0]]) is None  # one window: no interval
    assert units([[1.0, math.nan]]) is None


def _steady_pair(directory: Path) -> list[str]:
    """Return the arguments of a comparison of two 8-rank jobs, forward 2 ms apart."""
    base = _job(directory / "base", lambda rank: 50 + rank)
    cand = _job(directory / "cand", lambda rank: 52 + rank)
    return ["compare", str(base), str(cand), "--json"]


def test_the_interval_is_the_same_on_every_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same files compared twice give the same JSON, every interval included."""
    args = _steady_pair(tmp_path)
    assert main(args) == 0
    first = capsys.readouterr().out
    assert not math.isnan(json.loads(first)["paths"][0]["p50_low_pct"])
    assert main(args) == 0
    assert capsys.readouterr().out == first


def test_the_interval_is_the_same_in_processes_of_other_hash_seeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two processes of other PYTHONHASHSEED print the JSON this process prints."""
    args = _steady_pair(tmp_path)
    assert main(args) == 0
    first = capsys.readouterr().out
    for seed in ("1", "2"):
        run = subprocess.run(
            [sys.executable, "-m", "looptrace", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
            timeout=120,
        )
        assert run.stdout == first


def test_a_rank_s_many_windows_do_not_narrow_its_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every rank's windows repeated 5 times: the same change and the same interval."""
    base = _job(tmp_path / "base", lambda rank: 50 + rank)
    cand = _job(tmp_path / "cand", lambda rank: 1.2 * (50 + rank))
    _, once = _paths(capsys, base, cand)
    base5 = _job(tmp_path / "base5", lambda rank: 50 + rank, repeat=5)
    cand5 = _job(tmp_path / "cand5", lambda rank: 1.2 * (50 + rank), repeat=5)
    _, five = _paths(capsys, base5, cand5)
    for path in (FORWARD, "root.training.data"):
        assert five[path]["base_windows"] == 5 * once[path]["base_windows"]
        for key in ("p50_change_pct", "p50_low_pct", "p50_high_pct", "share_low_pp"):
            assert five[path][key] == pytest.approx(once[path][key], rel=1e-9, abs=1e-9)


def test_a_rank_of_many_windows_is_one_unit_of_the_resample() -> None:
    """Rank 0 holds 100 windows, 7 ranks 1: about (7/8)^8 = 34 % of resamples lack rank 0."""
    sample = units([[1.0] * 100, *([[0.0]] * 7)])
    assert sample is not None
    assert (sample.sums, sample.counts) == ([100.0, *[0.0] * 7], [100, *[1] * 7])
    means = Resampler().means("base", sample)
    without = sum(mean == 0.0 for mean in means) / len(means)
    assert 0.28 < without < 0.40  # resampling windows: rank 0 in every resample
    assert Resampler().means("base", sample) == means  # the fixed seed


def _stats(count: int, total: float) -> SectionStats:
    mean = total / count if count else math.nan
    return SectionStats(count, total, mean, mean, mean, 0.0, mean, mean, mean, 0.0, 0, ())


def test_the_main_timer_is_the_one_of_the_merged_windows() -> None:
    """Without merging quantiles: 50 drawn sets of windows give `main_timer(merge_windows)`."""
    rng = random.Random(5)
    paths = ["root.a", "root.a.b", "root.c", "root.c.d", "root.e.f", "root.g"]
    for _ in range(50):
        windows = [
            Window(
                rank,
                None,
                None,
                {
                    path: _stats(rng.choice([0, 2, 3]), rng.choice([1.0, 2.0, math.nan]))
                    for path in rng.sample(paths, rng.randint(1, len(paths)))
                },
            )
            for rank in range(rng.randint(1, 4))
        ]
        assert _main_timer(windows) == main_timer(merge_windows(windows))
