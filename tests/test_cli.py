"""The command line: `looptrace demo` and the parser."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from looptrace._cli import main
from looptrace._demo import run_demo


def test_demo_writes_files_and_prints_their_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Demo writes spans and snapshots, prints the span file's tree table and the commands."""
    out_dir = tmp_path / "demo"
    assert main(["demo", "--steps", "100", "--seed", "1", "--out", str(out_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("looptrace demo: 100 simulated training steps, ")
    assert lines[0].endswith(f" s of simulated time, written to {out_dir}/")
    # 100 steps of 7 sections, 2 evaluations and 1 checkpoint
    assert lines[2] == "span file: 703 spans of 100 traced steps, rank 0, steps 0-99"
    assert lines[4].split() == [
        "section", "count", "mean", "p50", "p99", "total", "%", "parent", "self",
    ]  # fmt: skip
    # Children follow their parent, indented, the largest total first.
    table = lines[5 : lines.index("", 5)]
    assert [line[: len(line) - len(line.lstrip())] + line.split()[0] for line in table] == [
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
    spans, snapshots = out_dir / "spans.jsonl", out_dir / "snapshots.jsonl"
    assert lines[lines.index("", 5) + 1 :] == [
        f"Spans:     {spans} (OTLP/JSON, one export batch per line)",
        f"Snapshots: {snapshots} (one line per reset())",
        "Look at them:",
        f"  looptrace summary {snapshots}",
        f"  looptrace plot {spans} -o {out_dir / 'timings.png'}",
        f"  looptrace perfetto {spans} -o {out_dir / 'trace.json'}"
        "   # then open it in https://ui.perfetto.dev",
        f"  looptrace report {spans} {snapshots} -o {out_dir / 'report.html'}"
        "   # one HTML page, opens offline",
        f"  looptrace replay {spans} --endpoint http://localhost:4318"
        "   # into a collector, Jaeger or Tempo",
    ]


def test_the_commands_the_demo_prints_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The summary, plot, perfetto and report commands the demo prints run on its files."""
    assert main(["demo", "--steps", "200", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    commands = [line.split("#")[0].split()[1:] for line in lines if line.startswith("  looptrace ")]
    assert [c[0] for c in commands] == ["summary", "plot", "perfetto", "report", "replay"]
    for argv in commands[:4]:
        assert main(argv) == 0, argv
    out = capsys.readouterr().out
    assert "\nsnapshot files: 2 windows, rank 0, steps 0-199\n" in out  # after its findings
    assert (tmp_path / "timings.png").stat().st_size > 10_000
    assert (tmp_path / "trace.json").stat().st_size > 10_000
    assert (tmp_path / "report.html").read_text().startswith("<!")


def test_demo_never_touches_a_file_it_did_not_create(tmp_path: Path) -> None:
    """A real run's spans.jsonl and an earlier demo's files stay as they were; fresh names."""
    real = tmp_path / "spans.jsonl"
    real.write_text('{"resourceSpans":[]}\n')
    first = run_demo(steps=20, directory=tmp_path)
    second = run_demo(steps=20, directory=tmp_path)
    assert real.read_text() == '{"resourceSpans":[]}\n'
    assert [(r.span_file, r.snapshot_file) for r in (first, second)] == [
        (tmp_path / "spans-2.jsonl", tmp_path / "snapshots-2.jsonl"),
        (tmp_path / "spans-3.jsonl", tmp_path / "snapshots-3.jsonl"),
    ]
    assert len((tmp_path / "snapshots-2.jsonl").read_text().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "snapshots-2.jsonl",
        "snapshots-3.jsonl",
        "spans-2.jsonl",
        "spans-3.jsonl",
        "spans.jsonl",
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


def test_demo_into_an_unwritable_directory_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --out that cannot be written gives exit 1 and one line naming the file."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["demo", "--steps", "5", "--out", str(blocker / "sub")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("looptrace demo: error: ")
    assert str(blocker / "sub") in err[0]


OFFLINE_PROGRAM = """
import sys
from looptrace._cli import main

out = sys.argv[1]
for argv in (
    ["summary", f"{out}/snapshots.jsonl"],
    ["summary", f"{out}/spans.jsonl"],
    ["perfetto", f"{out}/spans.jsonl", "-o", f"{out}/trace.json"],
):
    assert main(argv) == 0, argv
loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "pytest")))
print(loaded, file=sys.stderr)
"""


def test_offline_commands_load_neither_the_sdk_nor_pytest(tmp_path: Path) -> None:
    """Summary and perfetto read files without importing the OpenTelemetry SDK or pytest."""
    run_demo(steps=20, seed=1, directory=tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", OFFLINE_PROGRAM, str(tmp_path)],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == "[]"
