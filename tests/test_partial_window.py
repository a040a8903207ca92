"""A window without a whole lap is partial: marked, and kept out of shares and per-lap rates."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from looptrace import Snapshot
from looptrace._cli import main
from looptrace._export.records import SNAPSHOT_KIND
from looptrace._offline.report_data import load_report
from looptrace.testing import Capture, FakeClock, capture


def _steps(cap: Capture, n: int) -> None:
    """Lap `root.train` `n` times: 50 ms in data, 50 ms in forward, 64 samples a step."""
    train = cap.lt.timer("train")
    for _ in range(n):
        train.record()
        train.record("data")
        cap.clock.advance(0.05)
        train.count("samples", 64)
        train.record("forward")
        cap.clock.advance(0.05)


def test_the_tail_of_a_lap_after_the_last_reset_is_a_partial_window() -> None:
    """Shutdown 38 ms after the last reset: that window is partial, the others are not."""
    cap = capture()
    seen: list[Snapshot] = []
    cap.lt.on_reset(seen.append)
    _steps(cap, 10)
    cap.lt.reset()  # inside step 9's lap, in its forward
    cap.clock.advance(0.038)
    cap.lt.timer("train").count("samples", 64)
    cap.lt.timer("train").stop()
    cap.lt.shutdown()
    full, tail = seen
    assert (full.partial, tail.partial) == (False, True)
    assert math.isnan(tail.rates["root.train"]["samples"].per_lap)
    assert [(f.kind, f.severity) for f in tail.diagnosis(min_severity="info")] == [
        ("partial_window", "info")
    ]
    assert tail.diagnosis() == []


def test_one_whole_lap_is_enough_and_an_empty_window_is_not_partial(cap: Capture) -> None:
    """A window holding one whole lap is not partial; nor is one with no lap at all."""
    train = cap.lt.timer("train")
    train.record()
    cap.clock.advance(0.1)
    train.stop()
    assert not cap.lt.reset().partial
    assert not cap.lt.reset().partial


def test_the_snapshot_file_marks_the_partial_window(tmp_path: Path) -> None:
    """The last window's line says `"partial": true`; the full window's line has no mark."""
    path = tmp_path / "snapshots.jsonl"
    cap = capture(clock=FakeClock(start_s=0.0), snapshot_file=path)
    _steps(cap, 10)
    cap.lt.reset()
    cap.clock.advance(0.038)
    cap.lt.timer("train").stop()
    cap.lt.shutdown()
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    windows = [line for line in lines if line.get("kind") == SNAPSHOT_KIND]
    assert [w.get("partial", False) for w in windows] == [False, True]


def _input_bound_run(directory: Path) -> Path:
    """Record 2 windows of 10 input-bound steps and the tail of one lap; return the file."""
    path = directory / "snapshots.jsonl"
    cap = capture(clock=FakeClock(start_s=0.0), snapshot_file=path)
    train = cap.lt.timer("train")
    for _ in range(2):
        for _ in range(10):
            train.record()
            train.record("data")
            cap.clock.advance(0.05)
            train.record("forward")
            cap.clock.advance(0.05)
        cap.lt.reset()
    cap.clock.advance(0.038)
    train.stop()
    cap.lt.shutdown()
    return path


def test_the_summary_counts_the_findings_of_whole_windows_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Input-bound in both whole windows: "(2 of 2 windows)", the partial tail not counted."""
    path = _input_bound_run(tmp_path)
    assert main(["summary", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    found = [line for line in lines if "input_bound:" in line]
    assert len(found) == 1
    assert "(2 of 2 windows)" in found[0]


def test_compare_leaves_the_partial_window_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each side's partial tail is no sample: 2 windows a side, not 3."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    base, cand = _input_bound_run(tmp_path / "a"), _input_bound_run(tmp_path / "b")
    assert main(["compare", str(base), str(cand), "--json"]) == 0
    paths = json.loads(capsys.readouterr().out)["paths"]
    assert {(p["base_windows"], p["cand_windows"]) for p in paths} == {(2, 2)}


def test_the_report_draws_no_share_bar_for_the_partial_window(tmp_path: Path) -> None:
    """The report's window shares: the two whole windows, not the tail's bar of "other"."""
    _input_bound_run(tmp_path)
    data = load_report([str(tmp_path / "snapshots.jsonl")], lambda _message: None)
    assert len(data.shares) == 2
