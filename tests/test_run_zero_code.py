"""`looptrace run`: a training script with no looptrace line, on one process and a gloo DDP job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from looptrace._cli import main
from looptrace._offline.run import _print_results, run_environment
from tests.helpers.processes import bare_env, run_ranks
from tests.helpers.system_runs import Reading, record_system_run, system_block

pytest.importorskip("torch", reason="the torch extra is not installed")

HELPERS = Path(__file__).parent / "helpers"
WORKER, INTERLEAVED = (
    HELPERS / "zero_code_worker.py",
    HELPERS / "interleaved_worker.py",
)
SECTIONS = ("data", "forward", "backward", "optimizer")
STEPS = 4


def step_totals(file: Path, timer: str) -> dict[str, float]:
    """Return each section's least total over the one-step windows of `file` of a whole step.

    A busy machine only ever adds time, to some steps: the least disturbed step shows what
    each instrumentation measures.
    """
    steps = [json.loads(line)["stats"] for line in file.read_text().splitlines()]
    whole = [step for step in steps if all(f"root.{timer}.{name}" in step for name in SECTIONS)]
    return {name: min(step[f"root.{timer}.{name}"]["total"] for step in whole) for name in SECTIONS}


def windows(file: Path) -> list[dict[str, Any]]:
    """Return the windows of a snapshot file."""
    return [json.loads(line) for line in file.read_text().splitlines()]


@pytest.mark.slow  # `looptrace run` starts the script as another process
def test_a_script_with_no_looptrace_line_gets_its_sections_and_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`looptrace run -- python script`: a lap per step, the summary and report command printed."""
    folder = tmp_path / "run"
    script = [str(WORKER), str(tmp_path / "store"), str(tmp_path / "done"), str(STEPS)]
    assert main(["run", "--out", str(folder), "--", sys.executable, *script]) == 0
    printed = capsys.readouterr().out
    assert "root.train" in printed
    assert re.search(r"^  host_rss_bytes +\d", printed, re.M)  # the system figures, sampled
    assert f"looptrace report {folder / 'spans.jsonl'} {folder / 'snapshots.jsonl'}" in printed
    found = windows(folder / "snapshots.jsonl")
    counts = {
        name: sum(w["stats"].get(f"root.train.{name}", {}).get("count", 0) for w in found)
        for name in SECTIONS
    }
    assert counts == {"data": STEPS + 2, "forward": STEPS, "backward": STEPS, "optimizer": STEPS}
    assert sum(w["stats"]["root.train"]["count"] for w in found) == STEPS


@pytest.mark.slow  # `looptrace run` starts the script as another process
def test_zero_code_sections_agree_with_hand_timed_ones_within_two_percent(tmp_path: Path) -> None:
    """The same loop, zero-code and hand-timed in turn: each section's step within 2 %."""
    folder = tmp_path / "run"
    command = [sys.executable, str(INTERLEAVED), "8", "6"]  # the least of 48 steps each
    assert main(["run", "--out", str(folder), "--reset-every", "1", "--", *command]) == 0
    zero = step_totals(folder / "snapshots.jsonl", "train")
    timed = step_totals(folder / "snapshots.jsonl", "hand")
    assert all(timed[name] > 0.02 for name in SECTIONS)
    agree = {name: abs(zero[name] / timed[name] - 1) < 0.02 for name in SECTIONS}
    assert agree == dict.fromkeys(SECTIONS, True), (zero, timed)


def test_the_run_prints_the_summary_with_its_system_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`looptrace run`'s end print is the summary's: the same system block, names escaped."""
    folder = tmp_path / "run"
    folder.mkdir()
    record_system_run(folder, [[Reading(50, 25), Reading(150, 75)]], extra={"fan\x1b[": 1.5})
    _print_results(folder)
    printed = capsys.readouterr().out
    assert main(["summary", str(folder / "snapshots.jsonl")]) == 0
    summary = system_block(capsys.readouterr().out)
    assert system_block(printed) == summary
    assert summary[-1] == "  fan\\x1b[                  1.5      1.5"
    assert "\x1b" not in printed


def test_run_without_a_command_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """`looptrace run` with nothing after `--` says what to give."""
    assert main(["run", "--"]) == 1
    assert "give the command after --" in capsys.readouterr().err


def test_the_run_environment_puts_the_instrumenting_directory_first(tmp_path: Path) -> None:
    """The program's PYTHONPATH starts with the sitecustomize directory; files go to the folder."""
    environ = run_environment({"PYTHONPATH": "/x"}, tmp_path, parts="data", reset_every=5)
    first, rest = environ["PYTHONPATH"].split(":", 1)
    assert (Path(first) / "sitecustomize.py").is_file()
    assert rest == "/x"
    assert environ["LOOPTRACE_SNAPSHOT_FILE"] == str(tmp_path.resolve() / "snapshots.jsonl")
    assert environ["LOOPTRACE_RUN_DIR"] == str(tmp_path.resolve())
    assert (environ["LOOPTRACE_INSTRUMENT"], environ["LOOPTRACE_RESET_EVERY"]) == ("data", "5")


def test_a_ddp_job_names_the_rank_slowed_in_forward_with_no_wait_sections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 gloo ranks of a DDP script with no looptrace line: rank 2, slow in forward, straggles."""
    folder = tmp_path / "run"
    folder.mkdir()
    for name, value in run_environment(bare_env(), folder, reset_every=3).items():
        monkeypatch.setenv(name, value)
    results = run_ranks(WORKER, 4, tmp_path, ["9", "2"], timeout_s=180)
    assert [result["steps"] for result in results] == [9] * 4
    crossed = [w for w in windows(folder / "snapshots.rank0.jsonl") if "across_ranks" in w]
    assert len(crossed) == 2
    assert [(w["straggler"]["rank"], w["straggler"]["cause"]) for w in crossed] == [
        (2, "root.train.forward")
    ] * 2


@pytest.mark.slow  # `looptrace run` starts the script as another process
def test_torchrun_ranks_are_instrumented_and_its_launcher_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`looptrace run -- torchrun --nproc-per-node 2`: a snapshot file per rank, none else."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    folder = tmp_path / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    command = [*torchrun, "--master-port", "0", str(WORKER), str(tmp_path / "store")]
    code = main(["run", "--out", str(folder), "--", *command, str(tmp_path / "done"), "4"])
    assert code == 0
    assert sorted(path.name for path in folder.glob("snapshots*")) == [
        "snapshots.rank0.jsonl",
        "snapshots.rank1.jsonl",
    ]
    assert "2 ranks" in capsys.readouterr().out


def test_opentelemetry_instrument_loads_looptrace_from_its_entry_point(tmp_path: Path) -> None:
    """`opentelemetry-instrument python script` times the script: snapshots with its sections."""
    from importlib.metadata import entry_points

    found = [e for e in entry_points(group="opentelemetry_instrumentor") if e.name == "looptrace"]
    launcher = Path(sys.executable).parent / "opentelemetry-instrument"
    if not found or not launcher.exists():
        pytest.skip("looptrace's entry point or opentelemetry-instrument is not installed")
    snapshots = tmp_path / "snapshots.jsonl"
    environ = bare_env(
        {
            "LOOPTRACE_SNAPSHOT_FILE": str(snapshots),
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
        }
    )
    script = [str(WORKER), str(tmp_path / "store"), str(tmp_path / "done"), str(STEPS)]
    subprocess.run([str(launcher), sys.executable, *script], env=environ, check=True, timeout=120)
    (window,) = windows(snapshots)
    assert window["stats"]["root.train.forward"]["count"] == STEPS
