"""Span and snapshot files: names per rank, OTLP/JSON lines, snapshot lines, crash safety."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from looptrace import ConfigError, RankInfo
from looptrace._export import span_file as _span_file
from looptrace._export.files import OtlpJsonFileExporter, rank_path
from looptrace._stats.health import Incidents
from looptrace.testing import capture

from .runs import record_run


def test_rank_path_formats_placeholder_or_inserts_rank_before_suffix() -> None:
    """`{rank}` is formatted; without it one process keeps the name, several get `.rank<N>`."""
    one, third = RankInfo(), RankInfo(rank=3, world_size=8)
    assert {
        "placeholder": rank_path("runs/spans-{rank}.jsonl", third),
        "placeholder, one process": rank_path("runs/spans-{rank}.jsonl", one),
        "plain, one process": rank_path("runs/spans.jsonl", one),
        "plain, several": rank_path("runs/spans.jsonl", third),
        "two suffixes": rank_path("runs/spans.otlp.jsonl", third),
        "no suffix": rank_path("runs/spans", third),
    } == {
        "placeholder": Path("runs/spans-3.jsonl"),
        "placeholder, one process": Path("runs/spans-0.jsonl"),
        "plain, one process": Path("runs/spans.jsonl"),
        "plain, several": Path("runs/spans.rank3.jsonl"),
        "two suffixes": Path("runs/spans.otlp.rank3.jsonl"),
        "no suffix": Path("runs/spans.rank3"),
    }


def test_span_file_holds_every_span_as_otlp_json(tmp_path: Path) -> None:
    """Each line is one OTLP/JSON batch; spans have hex ids, integer enums, string int64s."""
    run = record_run(tmp_path, data_ms=(10, 20))
    lines = run.span_file.read_text().splitlines()
    batches = [json.loads(line) for line in lines]
    spans = [
        span
        for batch in batches
        for resource_spans in batch["resourceSpans"]
        for scope_spans in resource_spans["scopeSpans"]
        for span in scope_spans["spans"]
    ]
    assert len(spans) == len(run.spans) == 6
    data = next(s for s in run.spans if s.name == "data")
    assert data.context is not None and data.parent is not None
    written = next(s for s in spans if s["spanId"] == f"{data.context.span_id:016x}")
    assert written == {
        "traceId": f"{data.context.trace_id:032x}",
        "spanId": f"{data.context.span_id:016x}",
        "parentSpanId": f"{data.parent.span_id:016x}",
        "name": "data",
        "kind": 1,
        "startTimeUnixNano": str(data.start_time),
        "endTimeUnixNano": str(data.end_time),
        "attributes": [
            {"key": "looptrace.path", "value": {"stringValue": "root.training.data"}},
            {"key": "looptrace.rank", "value": {"intValue": "0"}},
            {"key": "looptrace.world_size", "value": {"intValue": "1"}},
            {"key": "looptrace.step", "value": {"intValue": "0"}},
        ],
        "status": {},
        "flags": 256,
    }
    resource = {
        kv["key"]: next(iter(kv["value"].values()))
        for kv in batches[0]["resourceSpans"][0]["resource"]["attributes"]
    }
    assert resource["host.name"] == socket.gethostname()
    assert resource["looptrace.rank"] == "0"


def test_snapshot_file_has_one_line_per_window(tmp_path: Path) -> None:
    """Every non-empty reset() window is one JSON line: step, time, rank, host and stats."""
    cap = capture(snapshot_file=tmp_path / "snapshots.jsonl")
    train = cap.lt.timer("training")
    train.record("forward")
    cap.clock.advance(0.25)
    train.record()
    first = cap.lt.reset()
    assert cap.lt.reset() == {}  # an empty window writes no line
    cap.clock.advance(0.5)
    train.stop()
    cap.lt.shutdown()
    lines = [json.loads(line) for line in (tmp_path / "snapshots.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    assert lines[0] == {
        "kind": "looptrace.snapshot",
        "version": 1,
        "step": 1,
        "time": first.end_ns / 1e9,
        "start_ns": first.start_ns,
        "end_ns": first.end_ns,
        "rank": 0,
        "world_size": 1,
        "host": socket.gethostname(),
        "stats": first.to_dict(),
    }
    # The second lap ended at stop(): two steps done when the last window closed.
    assert (lines[1]["step"], lines[1]["stats"]["root.training"]["total"]) == (2, 0.5)


def test_undefined_statistics_are_written_as_null(tmp_path: Path) -> None:
    """NaN (e.g. the std of a window a section never finished in) is written as JSON null."""
    cap = capture(snapshot_file=tmp_path / "s.jsonl", trace_every=0)
    train = cap.lt.timer("training")
    train.record("forward")
    cap.clock.advance(0.25)
    snap = cap.lt.reset()
    cap.lt.shutdown()
    text = (tmp_path / "s.jsonl").read_text()
    assert "NaN" not in text
    nan_fields = {k for k, v in snap["root.training"].to_dict().items() if v != v}  # noqa: PLR0124
    line = json.loads(text.splitlines()[0])["stats"]["root.training"]
    assert {k for k, v in line.items() if v is None} == nan_fields


def test_environment_variables_name_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LOOPTRACE_TRACE_FILE and LOOPTRACE_SNAPSHOT_FILE work like the arguments, per rank."""
    monkeypatch.setenv("LOOPTRACE_TRACE_FILE", str(tmp_path / "t-{rank}.jsonl"))
    monkeypatch.setenv("LOOPTRACE_SNAPSHOT_FILE", str(tmp_path / "s.jsonl"))
    cap = capture(rank=RankInfo(rank=1, world_size=2))
    cap.lt.timer("training").record()
    cap.clock.advance(0.1)
    cap.lt.timer("training").stop()
    cap.lt.shutdown()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.rank1.jsonl", "t-1.jsonl"]
    assert all(p.read_text().endswith("\n") for p in tmp_path.iterdir())


def test_disabled_sdk_writes_snapshots_but_no_span_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With OTEL_SDK_DISABLED=true there are no spans to write; snapshots still are."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    cap = capture(trace_file=tmp_path / "t.jsonl", snapshot_file=tmp_path / "s.jsonl")
    cap.lt.timer("training").record()
    cap.clock.advance(0.1)
    cap.lt.shutdown()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]


def test_a_file_that_cannot_be_opened_fails_configure_clearly(tmp_path: Path) -> None:
    """An unwritable path is a ConfigError naming the file, before anything is wired."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"cannot open .*not-a-directory/t.jsonl for writing"):
        capture(trace_file=blocker / "t.jsonl")
    with pytest.raises(ConfigError, match="must not be empty"):
        capture(snapshot_file="")


def test_span_file_needs_an_sdk_tracer_provider(tmp_path: Path) -> None:
    """A trace_file with a provider that is not the SDK's is a clear error."""
    with pytest.raises(ConfigError, match="needs an OpenTelemetry SDK TracerProvider"):
        from looptrace import configure

        configure(tracer_provider=trace.NoOpTracerProvider(), trace_file=tmp_path / "t.jsonl")


def test_a_failed_write_is_counted_not_raised(tmp_path: Path) -> None:
    """An export that cannot write returns FAILURE and counts an internal error."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    cap = capture()
    cap.lt.timer("training").record()
    cap.lt.timer("training").stop()
    incidents = Incidents()
    exporter = OtlpJsonFileExporter(tmp_path / "t.jsonl", incidents)
    exporter.shutdown()
    assert exporter.export(cap.finished_spans()) == SpanExportResult.FAILURE
    assert incidents.internal_errors == 1


def test_reopening_after_a_truncated_line_starts_a_new_line(tmp_path: Path) -> None:
    """A file a killed writer left mid-line gets its next line on a line of its own."""
    (tmp_path / "spans.jsonl").write_bytes(b'{"resourceSpans":[{"reso')
    run = record_run(tmp_path, data_ms=(10,))
    lines = run.span_file.read_bytes().split(b"\n")
    assert lines[0] == b'{"resourceSpans":[{"reso'
    assert all(json.loads(line) for line in lines[1:-1])
    assert lines[-1] == b""


def test_lines_written_before_a_kill_are_complete(tmp_path: Path) -> None:
    """A process killed with SIGKILL leaves only complete lines: each batch is on disk at once."""
    code = textwrap.dedent(
        f"""
        import os, signal, time
        import looptrace
        lt = looptrace.configure(trace_file={str(tmp_path / "t.jsonl")!r},
                                 snapshot_file={str(tmp_path / "s.jsonl")!r})
        train = lt.timer("training")
        for _ in range(50):
            train.record("step")
        train.stop()
        lt.reset()
        time.sleep(0.5)  # the batch processor exports after OTEL_BSP_SCHEDULE_DELAY
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL
    spans = sum(
        len(scope["spans"])
        for line in (tmp_path / "t.jsonl").read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
    )
    assert spans == 51  # 50 sections and the one lap of "training"
    snapshot = json.loads((tmp_path / "s.jsonl").read_text())
    assert snapshot["stats"]["root.training.step"]["count"] == 50


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trace_file": "a\0b"}, "trace_file: the file name 'a\\\\x00b' holds a NUL character"),
        ({"snapshot_file": "a\0b"}, "snapshot_file: the file name"),
        ({"trace_file": 123}, "trace_file: expected a file path, got int"),
        ({"snapshot_file": b"s.jsonl"}, "snapshot_file: expected a file path, got bytes"),
    ],
)
def test_unusable_file_names_are_config_errors_naming_the_setting(
    kwargs: dict[str, object], message: str
) -> None:
    """A NUL character or a name that is not a path: ConfigError naming the setting."""
    with pytest.raises(ConfigError, match=message):
        capture(**kwargs)  # type: ignore[arg-type]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_failed_configure_releases_every_descriptor_and_leaves_no_files(
    tmp_path: Path,
) -> None:
    """Prometheus port busy, 50 times: no descriptor leaks, no file or directory is left."""
    from looptrace import configure

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        kept = tmp_path / "kept.jsonl"
        kept.write_text('{"resourceSpans":[]}\n')
        configure(tracer_provider=TracerProvider(), trace_file=tmp_path / "warm.jsonl").shutdown()
        before = _open_fds()
        for _ in range(50):
            with pytest.raises(ConfigError, match=r"prometheus: .*(in use|address)"):
                configure(
                    tracer_provider=TracerProvider(),
                    trace_file=tmp_path / "new" / "spans.jsonl",
                    snapshot_file=kept,
                    prometheus=f"127.0.0.1:{port}",
                )
        after = _open_fds()
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.jsonl", "warm.jsonl"]
    assert kept.read_text() == '{"resourceSpans":[]}\n'


def test_a_trace_file_keeps_every_span_at_trace_every_1(tmp_path: Path) -> None:
    """10,000 traced steps of one section: all 20,001 spans are in the file, none counted lost."""
    from looptrace import configure
    from looptrace.testing import FakeClock

    clock = FakeClock()
    lt = configure(
        tracer_provider=TracerProvider(),
        clock=clock,
        trace_every=1,
        trace_file=tmp_path / "spans.jsonl",
    )
    train = lt.timer("train")
    for _ in range(10_000):
        train.record("data")
        clock.advance(0.001)
        train.record()
    train.stop()
    lt.shutdown()
    assert (_spans_in(tmp_path / "spans.jsonl"), lt.health().dropped_spans) == (20_001, 0)


def _spans_in(path: Path) -> int:
    return sum(
        len(scope["spans"])
        for line in path.read_text().splitlines()
        if "resourceSpans" in line
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
    )


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
            time.sleep(0.3)  # let the writer write this window's spans
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
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    written = _spans_in(spans)
    assert figures["dropped"] == 6001 - written > 0
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
    spans_summary = capsys.readouterr().out.splitlines()[0]
    assert main(["summary", str(snapshots)]) == 0
    windows_summary = capsys.readouterr().out.splitlines()[0]
    assert (spans_summary, windows_summary) == (
        f"span files: {written} spans, rank 0, steps 0-3000, {figures['dropped']} spans lost",
        "snapshot files: 21 windows, rank 0, closed at steps 100-3001, 10 windows lost",
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
