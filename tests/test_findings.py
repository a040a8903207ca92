"""`looptrace summary` prints the recorded findings first: at most five, most severe first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from looptrace._cli import main
from looptrace._offline.findings import findings_text
from looptrace._offline.window_records import Window
from looptrace.testing import capture


def _run(path: Path, sections: dict[str, float], windows: int = 3) -> None:
    """Write `windows` windows of 4 laps through `sections` to the snapshot file `path`."""
    cap = capture(snapshot_file=path)
    timer = cap.lt.timer("train")
    for _ in range(windows):
        for _ in range(4):
            timer.record()
            for name, seconds in sections.items():
                timer.record(name)
                cap.clock.advance(seconds)
        timer.stop()
        cap.lt.reset()
    cap.lt.shutdown()


def _summary(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    assert main(["summary", *map(str, args)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def test_an_input_bound_run_is_named_before_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The snapshot file records each window's findings; the summary prints them first."""
    path = tmp_path / "snapshots.jsonl"
    _run(path, {"data": 0.030, "forward": 0.070})
    line = json.loads(path.read_text().splitlines()[0])
    assert [(f["kind"], f["severity"]) for f in line["findings"]] == [("input_bound", "critical")]
    out = _summary(capsys, path).splitlines()
    assert out[:3] == [
        "findings (1 of 1, most severe first):",
        "  critical input_bound: 30% of the root.train lap waits for input in root.train.data "
        "(0.120 s of 0.400 s) (3 of 3 windows); try: more DataLoader workers, pin_memory, "
        "prefetching, or lighter transforms",
        "",
    ]
    assert out[3].startswith("snapshot files: 3 windows")


def test_a_healthy_run_is_silent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A healthy run records no findings, and the summary prints no findings part."""
    path = tmp_path / "snapshots.jsonl"
    _run(path, {"data": 0.002, "forward": 0.098})
    assert all("findings" not in json.loads(line) for line in path.read_text().splitlines())
    assert _summary(capsys, path).startswith("snapshot files: 3 windows")


def test_files_without_findings_print_no_findings_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lines written before windows were diagnosed (no `findings` key) print no findings part."""
    path = tmp_path / "snapshots.jsonl"
    _run(path, {"data": 0.030, "forward": 0.070})
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    for line in lines:
        del line["findings"]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert _summary(capsys, path).startswith("snapshot files: 3 windows")


def test_a_cross_rank_window_records_its_straggler(tmp_path: Path) -> None:
    """The line of a window with a straggler holds it, and its straggler finding."""
    from looptrace import RankInfo, Snapshot
    from looptrace._export.files import SnapshotFileWriter
    from looptrace._stats.straggler import Straggler

    path = tmp_path / "snapshots.jsonl"
    writer = SnapshotFileWriter(path, RankInfo(rank=0, world_size=2))
    cap = capture()
    timer = cap.lt.timer("train")
    timer.record("forward")
    cap.clock.advance(0.1)
    timer.stop()
    snapshot: Snapshot = cap.lt.reset()
    cap.lt.shutdown()
    straggler = Straggler(1, "wait", 0.05, 0.1, "root.train.forward")
    writer(snapshot.with_spreads({}, straggler))
    writer.close()
    line = json.loads(path.read_text())
    assert line["straggler"] == straggler.to_dict()
    assert [(f["kind"], f["rank"]) for f in line["findings"]] == [("straggler", 1)]


def test_at_most_five_most_severe_first() -> None:
    """Info findings left out; of the rest the five most severe, then the most frequent."""

    def finding(kind: str, severity: str, rank: int) -> dict[str, object]:
        return {"kind": kind, "severity": severity, "path": None, "rank": rank,
                "message": f"{kind} on {rank}", "action": ""}  # fmt: skip

    windows = [
        Window(rank=0, step=1, host=None, stats={}, findings=(
            finding("slow_steps", "info", 0), finding("self_time", "warning", 0),
            finding("straggler", "warning", 1), finding("outside_laps", "warning", 0),
        )),
        Window(rank=0, step=2, host=None, stats={}, findings=(
            finding("straggler", "critical", 1), finding("self_time", "warning", 0),
            finding("input_bound", "critical", 0), finding("slow_steps", "info", 1),
            finding("chronic_straggler", "warning", 3),
        )),
    ]  # fmt: skip
    assert findings_text(windows) == "\n".join(
        [
            "findings (5 of 5, most severe first):",
            "  critical straggler: straggler on 1 (2 of 2 windows)",
            "  critical input_bound: input_bound on 0 (1 of 2 windows)",
            "  warning  self_time: self_time on 0 (2 of 2 windows)",
            "  warning  outside_laps: outside_laps on 0 (1 of 2 windows)",
            "  warning  chronic_straggler: chronic_straggler on 3 (1 of 2 windows)",
        ]
    )


def test_a_throughput_drop_over_the_run_reaches_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The live run's history names a dropping window in its line; the summary prints it."""
    path = tmp_path / "snapshots.jsonl"
    cap = capture(snapshot_file=path)
    timer = cap.lt.timer("train")
    for samples in (100, 100, 100, 100, 70, 70):
        for _ in range(4):
            timer.record()
            timer.count("samples", samples)
            timer.record("forward")
            cap.clock.advance(0.1)
        timer.stop()
        cap.lt.reset()
    cap.lt.shutdown()
    out = _summary(capsys, path).splitlines()
    assert out[:3] == [
        "findings (1 of 1, most severe first):",
        "  warning  throughput_drop: root.train counted 700 samples/s, 30% below the run's "
        "sustained 1000 samples/s (the median of 3 windows before it) (1 of 6 windows); try: "
        "compare this window's sections with an earlier one's: which grew, and what else ran "
        "then",
        "",
    ]
