"""`looptrace compare`: a known slowdown is flagged (exit 1), two runs of the same code are not."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from looptrace._cli import main

from .helpers.runs import record_run

STEPS = 40  # 20 windows of two laps each


def _run(directory: Path, *, seed: int, forward_ms: float) -> Path:
    """Record a run on the fake clock: `data` drawn around 20 ms, a constant `forward`."""
    directory.mkdir()
    rng = random.Random(seed)
    data = [rng.uniform(17, 23) for _ in range(STEPS)]
    return record_run(directory, data_ms=data, forward_ms=forward_ms).snapshot_file


def _compare(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main(["compare", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_20_percent_slower_section_is_flagged_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A forward of 50 ms -> 60 ms: +20 % flagged beyond 10 %, first by impact; data is not."""
    base = _run(tmp_path / "base", seed=1, forward_ms=50)
    cand = _run(tmp_path / "cand", seed=2, forward_ms=60)
    code, out, err = _compare(capsys, base, cand, "--max-regression", "10", "--json")
    assert (code, err) == (1, "")
    result = json.loads(out)
    assert result["regression"] is True
    by_path = {entry["path"]: entry for entry in result["paths"]}
    forward = by_path["root.training.forward"]
    assert forward["flagged"] is True
    assert forward["p50_change_pct"] == pytest.approx(20.0)
    assert forward["p50_low_pct"] == pytest.approx(20.0)
    assert forward["impact_s"] == pytest.approx(0.010)
    assert forward["base_windows"] == forward["cand_windows"] == STEPS // 2
    assert by_path["root.training.data"]["flagged"] is False
    assert [entry["flagged"] for entry in result["paths"]].count(True) == 2  # forward, the lap
    assert result["paths"][0]["path"] in {"root.training", "root.training.forward"}

    code, out, _ = _compare(capsys, base, cand, "--max-regression", "10")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["section", "base", "p50", "cand"]
    assert any(line.startswith("! root.training.forward ") and "+20.0%" in line for line in lines)
    assert lines[-1].startswith("REGRESSION beyond 10%: ")
    assert "root.training.forward (+20.0%)" in lines[-1]


def test_two_runs_of_the_same_code_are_not_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same loop with other random data times: no section beyond 10 %, exit 0."""
    base = _run(tmp_path / "base", seed=1, forward_ms=50)
    cand = _run(tmp_path / "cand", seed=2, forward_ms=50)
    code, out, err = _compare(capsys, base, cand, "--max-regression", "10", "--json")
    assert (code, err) == (0, "")
    result = json.loads(out)
    assert result["regression"] is False
    data = next(e for e in result["paths"] if e["path"] == "root.training.data")
    assert abs(data["p50_change_pct"]) < 10  # a few percent of noise between two samples
    assert data["p50_low_pct"] < data["p50_change_pct"] < data["p50_high_pct"]
    assert not any(entry["flagged"] for entry in result["paths"])
    code, out, _ = _compare(capsys, base, cand, "--max-regression", "10")
    assert code == 0
    assert out.splitlines()[-1] == "no section's p50 grew by more than 10% beyond noise"


def test_without_a_threshold_a_slowdown_is_reported_but_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --max-regression: the table only, exit 0, nothing flagged."""
    base = _run(tmp_path / "base", seed=1, forward_ms=50)
    cand = _run(tmp_path / "cand", seed=2, forward_ms=60)
    code, out, _ = _compare(capsys, base, cand)
    assert code == 0
    assert "!" not in out and "+20.0%" in out


def test_directories_and_globs_name_a_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A side can be a directory or a quoted glob; the same comparison results."""
    _run(tmp_path / "base", seed=1, forward_ms=50)
    _run(tmp_path / "cand", seed=2, forward_ms=60)
    code, out, _ = _compare(
        capsys, tmp_path / "base", f"{tmp_path}/cand/snap*.jsonl", "--max-regression", "10"
    )
    assert code == 1
    assert "root.training.forward (+20.0%)" in out


def test_span_files_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A side of span files: one error line naming the file."""
    run = record_run(tmp_path)
    code, out, err = _compare(capsys, run.span_file, run.snapshot_file)
    assert (code, out) == (1, "")
    assert err == (
        f"looptrace compare: error: compare needs snapshot files; {run.span_file} is a span file\n"
    )


def test_two_windows_a_side_cannot_fail_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """+20 % in forward over 2 windows a side: listed as not judged, exit 0; --min-windows 2: 1."""
    (tmp_path / "base").mkdir()
    (tmp_path / "cand").mkdir()
    base = record_run(tmp_path / "base", data_ms=[20] * 4, forward_ms=50).snapshot_file
    cand = record_run(tmp_path / "cand", data_ms=[20] * 4, forward_ms=60).snapshot_file
    code, out, _ = _compare(capsys, base, cand, "--max-regression", "10", "--json")
    by_path = {entry["path"]: entry for entry in json.loads(out)["paths"]}
    assert code == 0
    assert by_path["root.training.forward"]["unjudged"] == "2 windows a side, needs 3"
    code, out, _ = _compare(capsys, base, cand, "--max-regression", "10")
    assert code == 0
    assert out.splitlines()[-1].startswith("not judged, too little evidence: ")
    assert "root.training.forward (2 windows a side, needs 3)" in out.splitlines()[-1]
    code, _, _ = _compare(capsys, base, cand, "--max-regression", "10", "--min-windows", "2")
    assert code == 1


def test_a_change_too_small_for_the_step_cannot_fail_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A data fetch 0.2 ms -> 0.4 ms in a 50 ms step is 0.4 % of it: not judged, unless asked."""
    (tmp_path / "base").mkdir()
    (tmp_path / "cand").mkdir()
    base = record_run(tmp_path / "base", data_ms=[0.2] * 8, forward_ms=50).snapshot_file
    cand = record_run(tmp_path / "cand", data_ms=[0.4] * 8, forward_ms=50).snapshot_file
    code, out, _ = _compare(capsys, base, cand, "--max-regression", "10", "--json")
    by_path = {entry["path"]: entry for entry in json.loads(out)["paths"]}
    assert code == 0
    assert by_path["root.training.data"]["unjudged"] == "0.4% of the step, needs 1%"
    assert by_path["root.training.data"]["flagged"] is False
    code, _, _ = _compare(capsys, base, cand, "--max-regression", "10", "--min-impact", "0.1")
    assert code == 1
