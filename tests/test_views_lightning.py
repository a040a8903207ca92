"""`looptrace report`, `plot` and `watch` on the files a Lightning run writes."""

from __future__ import annotations

import html
import json
import logging
import re
from pathlib import Path

import pytest

from looptrace._cli import main
from looptrace._offline.palette import LEGEND
from looptrace._offline.plot_data import SELF, from_spans, from_windows
from looptrace._offline.reader import open_inputs
from looptrace._offline.summary import summarize_spans, summarize_windows
from looptrace._offline.watch import Watcher, view
from looptrace._offline.window_records import load_windows
from looptrace.testing import capture

torch = pytest.importorskip("torch", reason="Lightning needs torch (the lightning extra)")
L = pytest.importorskip("lightning", reason="the lightning extra is not installed")
integration = pytest.importorskip("looptrace.integrations.lightning")

from .helpers.console import text_lines  # noqa: E402
from .helpers.lightning import EPOCHS, Items, Tiny, everything  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated"),
    pytest.mark.filterwarnings("ignore:The '\\w+' does not have many workers"),
]
LAPS = 20  # 2 epochs of 10 batches


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return the directory of the span and snapshot files of a Lightning fit with every hook."""
    directory = tmp_path_factory.mktemp("lightning")
    logging.getLogger("lightning").setLevel(logging.WARNING)
    cap = capture(
        trace_every=3,
        trace_file=directory / "spans.jsonl",
        snapshot_file=directory / "snapshots.jsonl",
    )
    profiler = integration.LooptraceProfiler(cap.lt, keep=everything)  # ~40 hooks
    loader = torch.utils.data.DataLoader(Items(cap.clock), batch_size=1)
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        profiler=profiler,
    )
    trainer.fit(Tiny(cap.clock), loader)
    cap.lt.shutdown()
    return directory


def test_the_report_shows_the_batch_laps_and_the_recorded_findings(
    lightning_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The batch timer, its hooks and the findings `looptrace summary` prints are in the page."""
    assert main(["summary", str(lightning_run / "snapshots.jsonl")]) == 0
    summary = capsys.readouterr().out
    findings = [line.strip() for line in summary.splitlines() if line.startswith("  critical")]
    output = tmp_path / "report.html"
    assert main(["report", str(lightning_run), "-o", str(output)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.endswith("1 rank, 7 waterfalls\n")
    page = output.read_text()
    body = re.sub(r"<(script|template)\b.*?</\1>", " ", page, flags=re.S)
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())
    assert f"{LAPS} laps of root.lightning" in text
    for hook in ("run_training_batch", "[_TrainingEpochLoop]:train_dataloader_next"):
        assert hook in text
    for line in findings:
        assert " ".join(line.replace("; try:", " try:").split()) in text


def test_plot_splits_the_batch_timer_not_the_one_lap_fit_timer(
    lightning_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From spans and from snapshots: `root.lightning` (20 laps), at most 8 named sections."""
    _, files = open_inputs([str(lightning_run / "spans.jsonl")], print)
    from looptrace._offline.span_records import load_spans

    spans = load_spans(files, print)
    kind, files = open_inputs([str(lightning_run / "snapshots.jsonl")], print)
    windows = load_windows(kind, files, print)
    for data in (
        from_spans(spans, summarize_spans(spans), None),
        from_windows(windows, summarize_windows(windows), None),
    ):
        assert data.timer == "root.lightning"
        assert len([name for name in data.layers if name not in ("other", SELF)]) <= LEGEND
        assert "root.lightning.run_training_batch" in data.layers
    output = tmp_path / "plot.png"
    assert main(["plot", str(lightning_run / "spans.jsonl"), "-o", str(output)]) == 0
    assert capsys.readouterr().err == ""


def test_watch_shows_the_batch_timer(lightning_run: Path) -> None:
    """The live view of the snapshot file: the batch timer's sections, no warning."""
    warnings: list[str] = []
    watcher = Watcher([str(lightning_run / "snapshots.jsonl")], warnings.append, lambda: 0.0)
    assert watcher.poll() == 1
    lines = text_lines(view(watcher.state, 0.0))
    assert lines[0].startswith("step 20 | 1 window | 1 rank")
    assert any(line.startswith("root.lightning ") for line in lines)
    assert any(line.strip().startswith("run_training_batch ") for line in lines)
    assert warnings == []


def test_a_corrupt_line_gets_the_same_warning_from_every_command(
    lightning_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line overwritten with garbage: one identical warning from summary, report, plot, watch."""
    [line] = (lightning_run / "snapshots.jsonl").read_text().splitlines(keepends=True)
    path = tmp_path / "snapshots.jsonl"
    later = json.loads(line)  # the same window written again as the next one, not a copy
    later["window"] = later.get("window", 0) + 1
    path.write_text(line + "{garbage\n" + json.dumps(later) + "\n")
    warning = f"{path}: skipped unreadable line 2"
    for command in (["summary"], ["report", "-o", str(tmp_path / "r.html")],
                    ["plot", "-o", str(tmp_path / "p.png")]):  # fmt: skip
        assert main([command[0], str(path), *command[1:]]) == 0
        assert capsys.readouterr().err == f"looptrace {command[0]}: warning: {warning}\n"
    warnings: list[str] = []
    assert Watcher([str(path)], warnings.append, lambda: 0.0).poll() == 2
    assert warnings == [warning]
