"""The command line: `looptrace demo` and the parser."""

from __future__ import annotations

import subprocess
import sys

import pytest

from looptrace._cli import main
from looptrace._demo import run_demo


def test_demo_prints_a_tree_table(capsys: pytest.CaptureFixture[str]) -> None:
    """Demo prints a title and a tree table whose rows are the loop's sections in order."""
    assert main(["demo", "--steps", "100", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("looptrace demo: 100 simulated training steps")
    assert lines[2].split() == [
        "section",
        "count",
        "mean",
        "p50",
        "p99",
        "total",
        "%",
        "parent",
        "self",
    ]
    # Children follow their parent, indented, the largest total first.
    assert [line[: len(line) - len(line.lstrip())] + line.split()[0] for line in lines[3:]] == [
        "root.training",
        "  backward",
        "  eval",
        "  forward",
        "    encoder",
        "    decoder",
        "  checkpoint",
        "  data",
        "  optimizer",
    ]


def test_demo_statistics_are_consistent() -> None:
    """The demo's window has 100 steps whose sections add up to the step time."""
    snap = run_demo(steps=300, seed=0).snapshot
    assert snap["root.training"].count == 100
    assert snap["root.training.forward"].count == 100
    children = [p for p in snap if p.count(".") == 2]
    assert sum(snap[p].total for p in children) == pytest.approx(snap["root.training"].total)
    forward = snap["root.training.forward"]
    assert snap["root.training.forward.encoder"].total + snap[
        "root.training.forward.decoder"
    ].total == pytest.approx(forward.total)


def test_python_dash_m_runs_the_cli() -> None:
    """`python -m looptrace --version` works as the console script does."""
    out = subprocess.run(
        [sys.executable, "-m", "looptrace", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out.strip().startswith("looptrace ")


def test_bad_arguments_exit_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """An invalid --steps exits with code 2 and a one-line reason, not a traceback."""
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--steps", "0"])
    assert exit_info.value.code == 2
    assert "must be at least 1, got 0" in capsys.readouterr().err
