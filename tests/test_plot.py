"""`looptrace plot`: PNGs of the expected size from span, snapshot and flat metrics files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from looptrace._cli import main
from looptrace._offline.plot_data import SELF, from_spans, from_windows
from looptrace._offline.reader import open_inputs
from looptrace._offline.span_records import load_spans
from looptrace._offline.summary import summarize_spans, summarize_windows
from looptrace._offline.window_records import load_windows
from looptrace.testing import capture

from .helpers.runs import Run, record_run


def _png(path: Path) -> tuple[int, int, int]:
    """Return width, height and the number of distinct colours of a PNG."""
    from matplotlib.image import imread

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    pixels = imread(path)
    colours = len({tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::7].tolist()})
    return width, height, colours


def _plot(capsys: pytest.CaptureFixture[str], output: Path, *args: object) -> str:
    assert main(["plot", *map(str, args), "-o", str(output)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


@pytest.fixture
def two_ranks(tmp_path: Path) -> list[Run]:
    """Two ranks of six steps; rank 1 loads data more slowly."""
    return [
        record_run(tmp_path, rank=r, world_size=2, data_ms=[10 * (r + 1)] * 6, forward_ms=30)
        for r in range(2)
    ]


def test_span_files_make_a_png_of_the_default_size(
    two_ranks: list[Run], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Span files of two ranks: a 1200x900 PNG with real content."""
    output = tmp_path / "timings.png"
    out = _plot(capsys, output, *(run.span_file for run in two_ranks))
    assert (
        out
        == f"wrote {output} (1200x900 px): 36 spans of 6 traced steps, 2 ranks (0, 1), steps 0-5\n"
    )
    width, height, colours = _png(output)
    assert (width, height) == (1200, 900)
    assert colours > 20


def test_snapshot_file_with_a_chosen_size(
    two_ranks: list[Run], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A snapshot file and --size 800x500: exactly that many pixels."""
    output = tmp_path / "snap.png"
    _plot(capsys, output, two_ranks[0].snapshot_file, "--size", "800x500")
    width, height, colours = _png(output)
    assert (width, height) == (800, 500)
    assert colours > 20


def test_flat_metrics_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A JSON-lines file of flat `timing.*` metrics (the experiment logger's) plots too."""
    cap = capture()
    train = cap.lt.timer("training")
    lines = []
    for step in range(1, 41):
        train.record("data")
        cap.clock.advance(0.01 * (1 + step % 3))
        train.record("forward")
        cap.clock.advance(0.05)
        train.record()
        if step % 10 == 0:
            lines.append(json.dumps({"step": step, **cap.lt.reset().as_metrics("timing")}))
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(lines) + "\n")
    output = tmp_path / "metrics.png"
    out = _plot(capsys, output, metrics)
    assert out == f"wrote {output} (1200x900 px): 4 windows, rank 0, closed at steps 10-40\n"
    width, height, colours = _png(output)
    assert (width, height) == (1200, 900)
    assert colours > 20


def test_what_is_drawn_from_spans(two_ranks: list[Run]) -> None:
    """Per step the timer splits into its sections; per rank the mean step does too."""
    _, files = open_inputs([str(run.span_file) for run in two_ranks], print)
    spans = load_spans(files, print)
    data = from_spans(spans, summarize_spans(spans), timer=None)
    rounded = {name: [round(v, 6) for v in values] for name, values in data.layers.items()}
    assert (data.timer, data.steps, rounded) == (
        "root.training",
        [0, 1, 2, 3, 4, 5],
        {  # the mean over both ranks of each step
            "root.training.forward": [0.03] * 6,
            "root.training.data": [0.015] * 6,
            SELF: [0.0] * 6,
        },
    )
    assert {r: {k: round(v, 6) for k, v in parts.items()} for r, parts in data.ranks.items()} == {
        0: {"root.training.forward": 0.03, "root.training.data": 0.01, SELF: 0.0},
        1: {"root.training.forward": 0.03, "root.training.data": 0.02, SELF: 0.0},
    }
    assert data.sections == ["root.training", "root.training.forward", "root.training.data"]


def test_what_is_drawn_from_windows(two_ranks: list[Run]) -> None:
    """Each window is its mean step, split into sections, at the step it closed."""
    kind, files = open_inputs([str(run.snapshot_file) for run in two_ranks], print)
    windows = load_windows(kind, files, print)
    data = from_windows(windows, summarize_windows(windows), timer="root.training")
    rounded = {name: [round(v, 6) for v in values] for name, values in data.layers.items()}
    assert (data.steps, rounded) == (
        [2, 4, 6],
        {
            "root.training.forward": [0.03] * 3,
            "root.training.data": [0.015] * 3,
            SELF: [0.0] * 3,
        },
    )
    assert sorted(data.ranks) == [0, 1]


def test_unknown_timer_is_a_one_line_error(
    two_ranks: list[Run], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--timer naming no section: an error listing the outermost ones."""
    code = main(
        ["plot", str(two_ranks[0].span_file), "-o", str(tmp_path / "p.png"), "--timer", "root.x"]
    )
    assert (code, capsys.readouterr().err) == (
        1,
        "looptrace plot: error: no section 'root.x' in the input (outermost: root.training)\n",
    )
    assert not (tmp_path / "p.png").exists()


def _hooks_run(path: Path) -> None:
    """Write one window: a one-lap `fit` timer around 20 laps of `train` through 12 sections.

    Section k takes (k + 1) ms, so the eight largest are s11 down to s4.
    """
    cap = capture(snapshot_file=path)
    fit = cap.lt.timer("fit")
    fit.record()
    cap.clock.advance(5.0)  # set-up before the first step: fit's total is the largest
    train = cap.lt.timer("train")
    for _ in range(20):
        train.record()
        for k in range(12):
            train.record(f"s{k}")
            cap.clock.advance((k + 1) / 1000)
    train.stop()
    fit.stop()
    cap.lt.reset()
    cap.lt.shutdown()


def test_the_default_timer_has_the_most_laps_and_the_legend_eight_sections(
    tmp_path: Path,
) -> None:
    """A one-lap wrapper timer is not the default; beyond 8 sections the rest are "other"."""
    _hooks_run(tmp_path / "snapshots.jsonl")
    kind, files = open_inputs([str(tmp_path / "snapshots.jsonl")], print)
    windows = load_windows(kind, files, print)
    data = from_windows(windows, summarize_windows(windows), timer=None)
    rounded = {name: [round(v, 6) for v in values] for name, values in data.layers.items()}
    assert (data.timer, rounded) == (
        "root.train",
        {
            **{f"root.train.s{k}": [(k + 1) / 1000] for k in range(11, 3, -1)},
            "other": [0.01],  # s0 to s3: 1 + 2 + 3 + 4 ms
            SELF: [0.0],
        },
    )


def test_each_section_has_its_palette_colour_in_the_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The PNG's bars are painted in the shared palette's colour of each section path."""
    from matplotlib.image import imread

    from looptrace._offline.palette import colours

    _hooks_run(tmp_path / "snapshots.jsonl")
    output = tmp_path / "plot.png"
    _plot(capsys, output, tmp_path / "snapshots.jsonl")
    pixels = imread(output)[..., :3].reshape(-1, 3)
    painted = {"#{:02x}{:02x}{:02x}".format(*(round(255 * c) for c in p)) for p in pixels.tolist()}
    expected = colours(f"root.train.s{k}" for k in range(4, 12))
    assert set(expected.values()) <= painted  # eight sections and "other"
