"""`looptrace perfetto`: Chrome/Perfetto trace JSON, pid = rank, tid = thread, proper nesting."""

from __future__ import annotations

import json
import socket
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from looptrace import RankInfo, configure
from looptrace._cli import main
from looptrace._configure import looptrace_resource
from looptrace.testing import FakeClock

from .helpers.runs import record_run

EPOCH_NS = 1_767_225_600_000_000_000  # the fake clock's epoch at 0 s


def _convert(capsys: pytest.CaptureFixture[str], output: Path, *files: Path) -> dict[str, Any]:
    assert main(["perfetto", *map(str, files), "-o", str(output)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {output}: ")
    trace: dict[str, Any] = json.loads(output.read_text())
    return trace


def _assert_nested_per_tid(events: list[dict[str, Any]]) -> None:
    """Every two X events on one (pid, tid) are disjoint or one contains the other."""
    lanes: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for event in events:
        start = round(event["ts"] * 1000)
        lanes[(event["pid"], event["tid"])].append((start, start + round(event["dur"] * 1000)))
    for intervals in lanes.values():
        for a_start, a_end in intervals:
            for b_start, b_end in intervals:
                disjoint = a_end <= b_start or b_end <= a_start
                nested = (a_start <= b_start and b_end <= a_end) or (
                    b_start <= a_start and a_end <= b_end
                )
                assert disjoint or nested, ((a_start, a_end), (b_start, b_end))


def test_every_span_once_with_rank_thread_and_microseconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each span is one X event: its ids, pid = rank, ts/dur in µs from the first span."""
    run = record_run(tmp_path, data_ms=(10, 20, 30))
    trace = _convert(capsys, tmp_path / "trace.json", run.span_file)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    by_id = {e["args"]["span_id"]: e for e in events}
    assert len(by_id) == len(events) == len(run.spans) == 9
    for span in run.spans:
        assert span.context is not None and span.start_time and span.end_time
        event = by_id[f"{span.context.span_id:016x}"]
        assert event == {
            "name": span.name,
            "cat": "looptrace",
            "ph": "X",
            "ts": (span.start_time - EPOCH_NS) / 1000,
            "dur": (span.end_time - span.start_time) / 1000,
            "pid": 0,
            "tid": 1,
            "args": {
                "path": (span.attributes or {})["looptrace.path"],
                "step": (span.attributes or {})["looptrace.step"],
                "rank": 0,
                "trace_id": f"{span.context.trace_id:032x}",
                "span_id": f"{span.context.span_id:016x}",
                **({"parent_span_id": f"{span.parent.span_id:016x}"} if span.parent else {}),
                "looptrace.world_size": 1,
                **{  # a lap's memory when it ended: traced laps carry it
                    key: value
                    for key, value in (span.attributes or {}).items()
                    if key.startswith("looptrace.memory.")
                },
            },
        }
    _assert_nested_per_tid(events)
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    assert meta == [
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
         "args": {"name": f"rank 0 @ {socket.gethostname()}"}},
        {"name": "process_sort_index", "ph": "M", "pid": 0, "tid": 0, "args": {"sort_index": 0}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "MainThread"}},
        {"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": 1, "args": {"sort_index": 1}},
    ]  # fmt: skip
    assert trace["otherData"]["origin_epoch_ns"] == EPOCH_NS


def test_ranks_merge_into_one_timeline_one_process_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Several rank files give one process per rank on one shared time axis."""
    runs = [
        record_run(tmp_path, rank=rank, world_size=3, data_ms=(10 * (rank + 1), 20))
        for rank in range(3)
    ]
    trace = _convert(capsys, tmp_path / "trace.json", *(r.span_file for r in runs))
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"
    }
    host = socket.gethostname()
    assert names == {0: f"rank 0 @ {host}", 1: f"rank 1 @ {host}", 2: f"rank 2 @ {host}"}
    counts = {pid: sum(1 for e in events if e["pid"] == pid) for pid in range(3)}
    assert counts == {0: 6, 1: 6, 2: 6}
    first_data = {
        e["pid"]: (e["ts"], e["dur"])
        for e in events
        if e["name"] == "data" and e["args"]["step"] == 0
    }
    assert first_data == {0: (0.0, 10_000.0), 1: (0.0, 20_000.0), 2: (0.0, 30_000.0)}  # fmt: skip
    _assert_nested_per_tid(events)


def _spans_of_two_threads_and_interleaved_timers() -> list[ReadableSpan]:
    clock = FakeClock(start_s=0.0)
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=looptrace_resource("t", RankInfo()))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    lt = configure(clock=clock, rank=RankInfo(), tracer_provider=provider, trace_every=1)
    train, io = lt.timer("training"), lt.timer("io")
    train.record("forward")
    clock.advance(1.0)
    io.record()  # an independent timer overlapping training without nesting in it
    clock.advance(1.0)
    train.stop()
    clock.advance(1.0)
    io.stop()

    def worker() -> None:
        with lt.timer("loader").section("read"):
            clock.advance(0.5)
        lt.timer("loader").stop()

    thread = threading.Thread(target=worker, name="prefetch")
    thread.start()
    thread.join()
    lt.shutdown()
    return list(memory.get_finished_spans())


def test_threads_get_tids_and_overlapping_timers_an_extra_track(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tid = thread (named); a timer that overlaps another without nesting gets its own track."""
    from looptrace._export.files import OtlpJsonFileExporter

    exporter = OtlpJsonFileExporter(tmp_path / "spans.jsonl")
    exporter.export(_spans_of_two_threads_and_interleaved_timers())
    exporter.shutdown()
    trace = _convert(capsys, tmp_path / "trace.json", tmp_path / "spans.jsonl")
    threads = {
        e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"
    }
    assert threads == {1: "MainThread", 2: "MainThread (overlapping 2)", 3: "prefetch"}
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted((threads[e["tid"]], e["name"], e["ts"]) for e in events) == [
        ("MainThread", "forward", 0.0),
        ("MainThread", "training", 0.0),
        ("MainThread (overlapping 2)", "io", 1_000_000.0),
        ("prefetch", "loader", 3_000_000.0),
        ("prefetch", "read", 3_000_000.0),
    ]
    _assert_nested_per_tid(events)


def test_perfetto_refuses_snapshot_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Snapshots have no spans to draw: a one-line error naming the file."""
    run = record_run(tmp_path)
    code = main(["perfetto", str(run.snapshot_file), "-o", str(tmp_path / "t.json")])
    assert code == 1
    assert capsys.readouterr().err == (
        f"looptrace perfetto: error: perfetto needs span files; {run.snapshot_file} is a "
        "snapshot file\n"
    )
    assert not (tmp_path / "t.json").exists()


def test_span_attributes_become_event_args(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A slow lap's ratio, the rank attributes and an error's exception are in the args."""
    clock = FakeClock(start_s=0.0)
    lt = configure(
        "looptrace-test",
        clock=clock,
        rank=RankInfo(rank=1, world_size=2),
        trace_every=1000,  # step 0 only; step 12 is traced for its slowness
        trace_file=tmp_path / "spans.jsonl",
    )
    train = lt.timer("training")
    for step in range(13):
        train.record("forward")
        clock.advance(1.0 if step == 12 else 0.1)
        if step == 0:
            with pytest.raises(ValueError, match="a bad batch"), train.section("backward"):
                clock.advance(0.01)
                raise ValueError("a bad batch")
        train.record()
    train.stop()
    lt.shutdown()
    trace = _convert(capsys, tmp_path / "trace.json", tmp_path / "spans.rank1.jsonl")
    args = {
        (e["name"], e["args"]["step"]): e["args"] for e in trace["traceEvents"] if e["ph"] == "X"
    }
    assert set(args) == {
        ("training", 0), ("forward", 0), ("backward", 0), ("training", 12), ("forward", 12)
    }  # fmt: skip
    slow = args["training", 12]
    assert slow["looptrace.slow_lap"] == pytest.approx(10.0)  # its time over the median lap
    assert (slow["rank"], slow["looptrace.world_size"]) == (1, 2)
    assert "looptrace.slow_lap" not in args["training", 0]
    assert {k: args["backward", 0][k] for k in ("status", "error")} == {
        "status": "ERROR",
        "error": "ValueError: a bad batch",
    }
    assert "status" not in args["forward", 0]
