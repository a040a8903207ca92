"""Span and snapshot files: names per rank, OTLP/JSON lines, snapshot lines, crash safety."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from looptrace import ConfigError, RankInfo
from looptrace._export.files import OtlpJsonFileExporter, rank_path
from looptrace._stats.health import Incidents
from looptrace.testing import capture

from .helpers.runs import record_run
from .helpers.spans import spans_in


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
    writer = lines[0]["writer"]
    assert len(writer) == 16 and int(writer, 16) >= 0 and lines[1]["writer"] == writer
    assert lines[1]["window"] == 1
    assert lines[0] == {
        "kind": "looptrace.snapshot",
        "version": 1,
        "step": 1,
        "steps": [0, 1],  # lap 1 began at the instant of the cut
        "time": first.end_ns / 1e9,
        "start_ns": first.start_ns,
        "end_ns": first.end_ns,
        "rank": 0,
        "world_size": 1,
        "host": socket.gethostname(),
        "writer": writer,
        "window": 0,
        "stats": first.to_dict(),
        "memory": first.memory.to_dict() if first.memory is not None else None,
    }
    # The second lap ended at stop(): two steps done when the last window closed.
    assert (lines[1]["step"], lines[1]["steps"], lines[1]["stats"]["root.training"]["total"]) == (
        2,
        [1, 1],
        0.5,
    )


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
    """An export that cannot write returns FAILURE and counts its spans lost, once."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    cap = capture()
    cap.lt.timer("training").record()
    cap.lt.timer("training").stop()
    incidents = Incidents()
    exporter = OtlpJsonFileExporter(tmp_path / "t.jsonl", incidents)
    exporter.shutdown()
    spans = cap.finished_spans()
    assert exporter.export(spans) == SpanExportResult.FAILURE
    assert (incidents.dropped_spans, incidents.internal_errors) == (len(spans), 0)


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
        lt.flush()  # every span and the window's line are on disk
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
    assert (spans_in(tmp_path / "spans.jsonl"), lt.health().dropped_spans) == (20_001, 0)
