"""Spans: one per interval, explicit timestamps, parents, attributes, one trace per step."""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import looptrace
from looptrace import RankInfo
from looptrace.testing import Capture, capture


def _run_steps(cap: Capture, steps: int) -> None:
    train = cap.lt.timer("training")
    for _ in range(steps):
        train.record("data")
        cap.clock.advance(0.1)
        train.record("forward")
        cap.clock.advance(0.2)
        train.record()
    train.stop()


def test_one_span_per_interval_with_parents_and_times(cap: Capture) -> None:
    """Every interval is one span, nested under the enclosing interval, with fake-clock times."""
    _run_steps(cap, 2)
    assert cap.span_tree() == [
        {
            "name": "data",
            "path": "root.training.data",
            "step": 0,
            "parent": "training",
            "start": 0.0,
            "end": 0.1,
            "status": "UNSET",
        },
        {
            "name": "forward",
            "path": "root.training.forward",
            "step": 0,
            "parent": "training",
            "start": 0.1,
            "end": 0.3,
            "status": "UNSET",
        },
        {
            "name": "training",
            "path": "root.training",
            "step": 0,
            "parent": None,
            "start": 0.0,
            "end": 0.3,
            "status": "UNSET",
        },
        {
            "name": "data",
            "path": "root.training.data",
            "step": 1,
            "parent": "training",
            "start": 0.3,
            "end": 0.4,
            "status": "UNSET",
        },
        {
            "name": "forward",
            "path": "root.training.forward",
            "step": 1,
            "parent": "training",
            "start": 0.4,
            "end": 0.6,
            "status": "UNSET",
        },
        {
            "name": "training",
            "path": "root.training",
            "step": 1,
            "parent": None,
            "start": 0.3,
            "end": 0.6,
            "status": "UNSET",
        },
        {
            "name": "training",
            "path": "root.training",
            "step": 2,
            "parent": None,
            "start": 0.6,
            "end": 0.6,
            "status": "UNSET",
        },
    ]


def test_each_outermost_lap_is_its_own_trace(cap: Capture) -> None:
    """A lap of the outermost running timer is the root span of a trace: one trace per step."""
    _run_steps(cap, 3)
    spans = cap.finished_spans()
    traces: dict[int, set[str]] = {}
    for span in spans:
        assert span.context is not None
        traces.setdefault(span.context.trace_id, set()).add(span.name)
    assert len(traces) == 4  # three full steps and the empty lap stopped at the end
    assert sorted(len(names) for names in traces.values()) == [1, 3, 3, 3]


def test_lap_of_a_timer_nested_under_root_joins_roots_trace(cap: Capture) -> None:
    """When root runs, a section of it is a child span, and root's lap is the trace root."""
    root = cap.lt.root
    root.record("training")
    cap.clock.advance(1.0)
    root.record("eval")
    cap.clock.advance(1.0)
    root.stop()
    tree = [(s["name"], s["parent"], s["path"]) for s in cap.span_tree()]
    assert tree == [
        ("training", "root", "root.training"),
        ("eval", "root", "root.eval"),
        ("root", None, "root"),
    ]
    trace_ids = {s.context.trace_id for s in cap.finished_spans() if s.context}
    assert len(trace_ids) == 1


def test_span_attributes_include_path_step_rank_and_the_laps_thread() -> None:
    """Spans carry path, step and rank; the outermost lap also names its thread and memory."""
    cap = capture(rank=RankInfo(rank=3, world_size=8, local_rank=1, local_world_size=4))
    train = cap.lt.timer("training")
    train.record("forward")
    cap.clock.advance(0.5)
    train.stop()
    (forward, training) = cap.finished_spans()
    assert dict(forward.attributes or {}) == {
        "looptrace.path": "root.training.forward",
        "looptrace.step": 0,
        "looptrace.rank": 3,
        "looptrace.world_size": 8,
    }
    lap = dict(training.attributes or {})
    host_peak = lap.pop("looptrace.memory.host_peak_rss", None)  # (see test_memory.py)
    assert host_peak is None or isinstance(host_peak, int)
    assert lap == {
        "looptrace.path": "root.training",
        "looptrace.step": 0,
        "looptrace.rank": 3,
        "looptrace.world_size": 8,
        "thread.id": threading.get_ident(),
        "thread.name": threading.current_thread().name,
    }


def test_trace_every_traces_multiples_and_aggregates_all() -> None:
    """trace_every=N traces laps 0, N, 2N..., while every section reaches the aggregates."""
    cap = capture(trace_every=2)
    _run_steps(cap, 5)
    steps = sorted({s["step"] for s in cap.span_tree()})
    assert steps == [0, 2, 4]
    snap = cap.lt.reset()
    assert snap["root.training.forward"].count == 5
    assert snap["root.training"].count == 6


def test_trace_every_zero_creates_no_spans_but_aggregates() -> None:
    """trace_every=0 traces nothing and still counts every section."""
    cap = capture(trace_every=0)
    _run_steps(cap, 3)
    assert cap.finished_spans() == []
    assert cap.lt.reset()["root.training.data"].count == 3


def test_traced_and_untraced_give_identical_statistics() -> None:
    """The span path and the fast path produce the same statistics for the same sections."""
    traced, untraced = capture(trace_every=1), capture(trace_every=0)
    for cap in (traced, untraced):
        _run_steps(cap, 4)
    assert traced.lt.reset().to_dict() == untraced.lt.reset().to_dict()


def test_section_spans_of_recursion_nest_under_the_same_path(cap: Capture) -> None:
    """A recursive section's spans nest, each with the same path."""
    train = cap.lt.timer("training")
    outer = train.section("walk")
    train.record()
    with outer:
        cap.clock.advance(1.0)
        with outer:
            cap.clock.advance(1.0)
    train.stop()
    tree = [(s["name"], s["parent"], s["path"]) for s in cap.span_tree()]
    assert tree == [
        ("walk", "walk", "root.training.walk"),
        ("walk", "training", "root.training.walk"),
        ("training", None, "root.training"),
    ]


def test_laps_of_another_thread_carry_that_threads_id_and_name(cap: Capture) -> None:
    """A lap timed in a worker thread names that thread; its sections carry no thread."""
    seen: dict[str, object] = {}

    def work() -> None:
        seen["thread.id"] = threading.get_ident()
        cap.lt.timer("loader").record()
        with cap.lt.timer("loader").section("read"):
            cap.clock.advance(0.1)
        cap.lt.timer("loader").stop()

    worker = threading.Thread(target=work, name="prefetch")
    worker.start()
    worker.join()
    threads = {
        (s.name, (s.attributes or {}).get("thread.id"), (s.attributes or {}).get("thread.name"))
        for s in cap.finished_spans()
    }
    assert threads == {
        ("read", None, None),
        ("loader", seen["thread.id"], "prefetch"),
    }


def test_a_failing_span_processor_never_reaches_the_loop() -> None:
    """A processor that raises on every span is counted; timing and statistics go on."""
    from opentelemetry.sdk.trace import SpanProcessor

    class Broken(SpanProcessor):
        def on_start(self, span: object, parent_context: object = None) -> None:
            raise RuntimeError("broken on_start")

        def on_end(self, span: object) -> None:
            raise RuntimeError("broken on_end")

    cap = capture()
    cap.tracer_provider.add_span_processor(Broken())  # type: ignore[arg-type]
    _run_steps(cap, 3)
    snap = cap.lt.reset()
    assert snap["root.training.forward"].count == 3
    assert cap.lt.health().internal_errors > 0


def test_shutdown_ends_running_intervals_as_cut_spans(cap: Capture) -> None:
    """shutdown() ends what runs, in the last window, with spans marked cut: no orphans."""
    train = cap.lt.timer("training")
    train.record("data")
    cap.clock.advance(1.0)
    train.record("forward")
    cap.clock.advance(0.5)
    cap.lt.shutdown()
    assert [(s["name"], s["parent"], s["end"], s["status"]) for s in cap.span_tree()] == [
        ("data", "training", 1.0, "UNSET"),
        ("forward", "training", 1.5, "ERROR"),
        ("training", None, 1.5, "ERROR"),
    ]
    (cut,) = [s for s in cap.finished_spans() if s.name == "training"]
    assert cut.status.description == "cut: still running at shutdown"


def test_no_span_is_built_while_nothing_reads_spans() -> None:
    """No processor but looptrace's: no spans are built; laps after one is added are traced."""
    provider = TracerProvider()
    lt = looptrace.configure(tracer_provider=provider, trace_every=1, rank=RankInfo())
    train = lt.timer("training")
    train.record("data")
    state = lt._engine.state()
    assert [interval.span for interval in state.outermost] == [None]
    train.record()  # lap 1 starts, untraced
    spans = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    train.record("data")
    train.record()  # lap 2 starts, traced
    train.record("data")
    train.stop()
    finished = spans.get_finished_spans()
    assert [(s.name, (s.attributes or {})["looptrace.step"]) for s in finished] == [
        ("data", 2),
        ("training", 2),
    ]
    assert {p: st.count for p, st in lt.reset().items()} == {
        "root.training": 3,
        "root.training.data": 3,
    }
    lt.shutdown()


def test_sections_of_a_never_lapped_timer_are_steps_of_their_own() -> None:
    """Sections only, never record(): each outermost section instance is a whole, sampled trace."""
    cap = capture(trace_every=2)
    handler = cap.lt.timer("handler")
    for name in ("tokenize", "generate", "tokenize", "generate"):
        with handler.section(name):
            cap.clock.advance(0.1)
    assert not handler.running
    tree = cap.span_tree()
    assert [(s["name"], s["parent"], s["step"], s["start"], s["end"]) for s in tree] == [
        ("tokenize", None, 0, 0.0, 0.1),
        ("tokenize", None, 2, 0.2, 0.3),
    ]
    assert {p: s.count for p, s in cap.lt.reset().items()} == {
        "root.handler": 4,
        "root.handler.tokenize": 2,
        "root.handler.generate": 2,
    }
