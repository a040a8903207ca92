"""Span files under faults: a full disk, a slow or stalled file; complete lines, losses counted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from looptrace._export import span_file as _span_file
from looptrace.testing import capture

from .helpers.spans import spans_in

FULL_DISK_PROGRAM = """
    import json, resource, signal, sys, time
    import looptrace
    from looptrace.testing import FakeClock

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    clock = FakeClock()
    lt = looptrace.configure(clock=clock, trace_every=1, trace_file=sys.argv[1],
                             snapshot_file=sys.argv[2])
    train = lt.timer("train")


    for step in range(3000):
        if step == 1000:  # the disk is full ...
            resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), resource.RLIM_INFINITY))
        if step == 2000:  # ... and has room again
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        train.record("data"); clock.advance(0.001)
        train.record()
        if step % 100 == 99:
            lt.reset()
            lt.flush()  # this window's spans and line are written (or lost) before the next
    train.stop()
    lt.shutdown()
    health = lt.health()
    print(json.dumps({"dropped": health.dropped_spans, "errors": health.internal_errors}))
"""


def test_a_full_disk_leaves_complete_lines_and_counts_the_loss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Writes past a file size limit fail whole; the loss is counted, said once, and recorded."""
    from looptrace._cli import main

    spans, snapshots = tmp_path / "spans.jsonl", tmp_path / "snapshots.jsonl"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(FULL_DISK_PROGRAM),
            str(spans),
            str(snapshots),
            "1000",
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(sys.path),
            "OTEL_BSP_SCHEDULE_DELAY": "10",
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    written = spans_in(spans)
    assert figures["dropped"] == 6001 - written > 0
    assert figures["errors"] == 10  # the windows lost; the spans lost count in "dropped" only
    lost = [json.loads(line) for line in spans.read_text().splitlines() if "lost" in line]
    assert lost == [{"kind": "looptrace.lost", "spans": figures["dropped"]}]
    windows = [json.loads(line) for line in snapshots.read_text().splitlines()]
    assert [w.get("step", w) for w in windows] == [
        *range(100, 1001, 100),
        {"kind": "looptrace.lost", "windows": 10},
        *range(2100, 3001, 100),
        3001,  # the window shutdown() closes
    ]
    for path in (spans, snapshots):
        assert all(json.loads(line) for line in path.read_bytes().splitlines())
    assert main(["summary", str(spans)]) == 0
    spans_summary = re.sub(r" of \d+ traced steps", "", capsys.readouterr().out.splitlines()[0])
    assert main(["summary", str(snapshots)]) == 0
    out = capsys.readouterr().out
    windows_summary = (out.split("\n\n", 1)[1] if out.startswith("findings") else out).splitlines()[
        0
    ]
    assert (spans_summary, windows_summary) == (
        f"span files: {written} spans, rank 0, steps 0-3000, {figures['dropped']} spans lost",
        "snapshot files: 21 windows, rank 0, steps 0-3000, 10 windows lost",
    )
    said = [re.sub(r"\d+ span", "N span", line) for line in result.stderr.splitlines()]
    assert sorted(line.split(" (")[0] for line in said) == sorted(
        [
            f"looptrace: cannot write spans to {spans}: File too large; lost spans are counted in "
            "lt.health().dropped_spans and recorded in the file when it can be written again",
            f"looptrace: cannot write a window to {snapshots}: File too large; lost windows are "
            "counted in lt.health().internal_errors and recorded in the file when it can be "
            "written again",
            "looptrace: N span(s) could not be exported; training goes on and further losses "
            "are counted in lt.health().dropped_spans, not logged",
        ]
    )


class _SlowWriter:
    """A span file writer whose disk is slow, or stalled until `release` is set."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.release = threading.Event()
        self.written = 0
        self.lost_spans = 0
        if delay_s:
            self.release.set()

    def export(self, spans: list[object]) -> object:
        self.release.wait()
        time.sleep(self.delay_s)
        self.written += len(spans)
        return None

    def lost(self, spans: int) -> None:
        self.lost_spans += spans

    def shutdown(self) -> None:
        """Nothing to close."""


def _finished_spans(count: int) -> list[ReadableSpan]:
    cap = capture()
    train = cap.lt.timer("t")
    for _ in range(count):
        train.record()
    train.stop()
    spans = list(cap.finished_spans())
    assert len(spans) == count
    return spans


def test_a_slow_span_file_makes_the_training_thread_wait_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the backlog the training thread waits for the writer: every span is written."""
    monkeypatch.setattr(_span_file, "BACKLOG", 8)
    monkeypatch.setattr(_span_file, "BATCH", 4)
    writer = _SlowWriter(delay_s=0.01)
    processor = _span_file.SpanFileProcessor(writer)
    for span in _finished_spans(100):
        processor.on_end(span)
    processor.shutdown()
    assert (writer.written, writer.lost_spans) == (100, 0)


def test_a_stalled_span_file_counts_spans_lost_and_stops_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A writer that never returns: past the backlog spans are counted lost, one wait only."""
    monkeypatch.setattr(_span_file, "BACKLOG", 8)
    monkeypatch.setattr(_span_file, "BATCH", 4)
    monkeypatch.setattr(_span_file, "STALL_S", 0.25)
    writer = _SlowWriter()
    processor = _span_file.SpanFileProcessor(writer)
    waits = []
    real_wait_for = processor._cond.wait_for

    def counted_wait_for(predicate: object, timeout: float | None = None) -> bool:
        waits.append(timeout)
        return real_wait_for(predicate, timeout)  # type: ignore[arg-type]

    for span in _finished_spans(50):
        processor._cond.wait_for = counted_wait_for  # type: ignore[method-assign]
        processor.on_end(span)
    writer.release.set()
    processor.shutdown()
    assert waits.count(0.25) <= 2  # the writer may take one batch before it stalls
    assert writer.written + writer.lost_spans == 50
    assert writer.lost_spans >= 50 - 8 - 4
