"""Span files read back give never-lapped timers' steps, which have no span on the wire."""

from __future__ import annotations

import threading
from pathlib import Path

from looptrace import RankInfo, configure
from looptrace._core.ids import step_ids
from looptrace._offline.reader import open_inputs
from looptrace._offline.span_records import SpanRecord, load_spans
from looptrace._offline.summary import summarize_spans
from looptrace.testing import FakeClock


def _read(path: Path) -> list[SpanRecord]:
    warnings: list[str] = []
    _, files = open_inputs([str(path)], warnings.append)
    spans = load_spans(files, warnings.append)
    assert warnings == []
    return spans


def test_each_request_reads_back_as_a_step_with_its_section_inside(tmp_path: Path) -> None:
    """The step takes the thread and the root's ids; the section nests in it; sums are exact."""
    clock = FakeClock(start_s=0.0)
    lt = configure(clock=clock, trace_every=1, trace_file=tmp_path / "spans.jsonl")
    serve = lt.timer("serve")
    for _ in range(2):
        with serve.section("handle"):
            with serve.timer("handle").section("parse"):
                clock.advance(0.02)
            clock.advance(0.08)
        clock.advance(1.0)  # between requests: no step runs
    windows = lt.reset()
    lt.shutdown()
    spans = _read(tmp_path / "spans.jsonl")
    by_path: dict[str, list[SpanRecord]] = {}
    for span in spans:
        by_path.setdefault(span.path, []).append(span)
    steps, handles = by_path["root.serve"], by_path["root.serve.handle"]
    assert [(s.name, s.step, s.parent_id, s.thread_name) for s in steps] == [
        ("serve", 0, "", "MainThread"),
        ("serve", 1, "", "MainThread"),
    ]
    assert [(h.parent_id, h.thread_name) for h in handles] == [(s.span_id, None) for s in steps]
    assert [p.parent_id for p in by_path["root.serve.handle.parse"]] == [h.span_id for h in handles]
    assert [(s.start_ns, s.end_ns) for s in steps] == [(h.start_ns, h.end_ns) for h in handles]
    assert all("looptrace.step_of" not in s.attributes for s in spans)
    summary = summarize_spans(spans)
    assert {
        p: (s.count, round(s.total, 9), round(s.self_time, 9)) for p, s in summary.combined.items()
    } == {p: (s.count, round(s.total, 9), round(s.self_time, 9)) for p, s in windows.items()}


def test_sections_a_record_adds_to_a_request_share_its_one_step(tmp_path: Path) -> None:
    """record() inside a request: two root spans on the wire, one step read back around both."""
    clock = FakeClock(start_s=0.0)
    lt = configure(clock=clock, trace_every=1, trace_file=tmp_path / "spans.jsonl")
    serve = lt.timer("serve")
    with serve.section("handle"):
        clock.advance(0.1)
        serve.record("reply")
        clock.advance(0.3)
    serve.stop()
    windows = lt.reset()
    lt.shutdown()
    spans = _read(tmp_path / "spans.jsonl")
    (step,) = [s for s in spans if s.path == "root.serve"]
    assert (step.start_ns, step.end_ns - step.start_ns) == (spans[0].start_ns, 400_000_000)
    assert sorted((s.name, s.parent_id) for s in spans if s is not step) == [
        ("handle", step.span_id),
        ("reply", step.span_id),
    ]
    assert {p: s.count for p, s in summarize_spans(spans).combined.items()} == {
        p: s.count for p, s in windows.items()
    }


def test_requests_of_two_threads_read_back_as_steps_of_their_own(tmp_path: Path) -> None:
    """The same step index in two threads: two steps, each with its thread's section."""
    clock = FakeClock(start_s=0.0)
    lt = configure(clock=clock, trace_every=1, trace_file=tmp_path / "spans.jsonl")
    serve = lt.timer("serve")

    def request() -> None:
        with serve.section("handle"):
            clock.advance(0.1)

    worker = threading.Thread(target=request, name="worker")
    worker.start()
    worker.join()
    request()
    lt.shutdown()
    spans = _read(tmp_path / "spans.jsonl")
    steps = {s.thread_name: s for s in spans if s.path == "root.serve"}
    assert sorted(steps) == ["MainThread", "worker"]
    assert {s.step for s in steps.values()} == {0}
    handles = sorted((s.parent_id, s.start_ns) for s in spans if s.path == "root.serve.handle")
    assert handles == sorted((s.span_id, s.start_ns) for s in steps.values())


def test_another_ranks_step_names_rank_0s_step_as_its_parent(tmp_path: Path) -> None:
    """With a run id, rank 1's request names rank 0's: read back, step under step, as laps do."""
    for rank in (0, 1):
        clock = FakeClock(start_s=0.0)
        lt = configure(
            clock=clock,
            trace_every=1,
            run_id="run-1",
            rank=RankInfo(rank=rank, world_size=2),
            trace_file=tmp_path / "spans.jsonl",
        )
        with lt.timer("serve").section("handle"):
            clock.advance(0.1)
        lt.shutdown()
    spans: list[SpanRecord] = []
    for path in sorted(tmp_path.glob("spans*.jsonl")):
        spans += _read(path)
    steps = {s.rank: s for s in spans if s.path == "root.serve"}
    handles = {s.rank: s for s in spans if s.path == "root.serve.handle"}
    trace_id, root_id = step_ids("run-1", "root.serve", 0)
    assert steps[0].span_id == f"{root_id:016x}"
    assert (steps[0].parent_id, steps[1].parent_id) == ("", steps[0].span_id)
    assert {s.trace_id for s in spans} == {f"{trace_id:032x}"}
    assert [handles[rank].parent_id for rank in (0, 1)] == [steps[0].span_id, steps[1].span_id]
