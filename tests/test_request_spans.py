"""The trace of a never-lapped timer's section (request handling): one root span a request."""

from __future__ import annotations

from opentelemetry import trace

from looptrace import RankInfo
from looptrace._core.ids import step_ids
from looptrace.testing import Capture, capture

RUN = "run-1"


def _requests(cap: Capture, count: int, *, slow: int | None = None) -> None:
    """`count` requests of `serve`: `handle` (0.1 s; 2 s for request `slow`), `parse` inside."""
    serve = cap.lt.timer("serve")
    handle = serve.section("handle")
    parse = serve.timer("handle").section("parse")
    for index in range(count):
        with handle:
            with parse:
                cap.clock.advance(0.02)
            cap.clock.advance(1.98 if index == slow else 0.08)


def test_a_traced_request_is_one_root_span_with_its_sections_below() -> None:
    """The section is the step's root span (no copy as the timer's); its sections nest in it."""
    cap = capture(trace_every=2)
    _requests(cap, 3)
    tree = [(s["name"], s["parent"], s["path"], s["step"]) for s in cap.span_tree()]
    assert tree == [
        ("parse", "handle", "root.serve.handle.parse", 0),
        ("handle", None, "root.serve.handle", 0),
        ("parse", "handle", "root.serve.handle.parse", 2),
        ("handle", None, "root.serve.handle", 2),
    ]
    assert {p: s.count for p, s in cap.lt.reset().items()} == {
        "root.serve": 3,
        "root.serve.handle": 3,
        "root.serve.handle.parse": 3,
    }


def test_the_request_span_carries_what_a_lap_span_carries() -> None:
    """Thread, memory and the step's derived ids (rank 0) are on the section's root span."""
    cap = capture(trace_every=1, run_id=RUN)
    _requests(cap, 2)
    roots = [s for s in cap.finished_spans() if s.parent is None]
    assert [(s.name, (s.attributes or {})["looptrace.step"]) for s in roots] == [
        ("handle", 0),
        ("handle", 1),
    ]
    for step, span in enumerate(roots):
        attributes = dict(span.attributes or {})
        assert attributes["thread.name"] == "MainThread"
        assert attributes["looptrace.memory.host_peak_rss"] > 0
        assert span.context is not None
        assert (span.context.trace_id, span.context.span_id) == step_ids(RUN, "root.serve", step)
    nested = [s for s in cap.finished_spans() if s.name == "parse"]
    assert all("thread.name" not in (s.attributes or {}) for s in nested)


def test_on_another_rank_the_request_span_names_the_steps_root_as_parent() -> None:
    """Rank 1's request span joins step N's trace under rank 0's derived root span id."""
    cap = capture(trace_every=1, run_id=RUN, rank=RankInfo(rank=1, world_size=2))
    _requests(cap, 2)
    (span,) = [
        s
        for s in cap.finished_spans()
        if s.name == "handle" and (s.attributes or {})["looptrace.step"] == 1
    ]
    trace_id, root_id = step_ids(RUN, "root.serve", 1)
    assert span.context is not None and span.parent is not None
    assert (span.context.trace_id, span.parent.span_id, span.parent.is_remote) == (
        trace_id,
        root_id,
        True,
    )


def test_the_ids_of_a_request_are_not_left_pinned_for_the_next_span() -> None:
    """After a traced request on rank 0, an application's own span gets ids of its own."""
    cap = capture(trace_every=1, run_id=RUN)
    _requests(cap, 1)
    tracer = cap.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("app") as span:
        context = span.get_span_context()
    assert context.trace_id != step_ids(RUN, "root.serve", 0)[0]
    assert context.trace_id != step_ids(RUN, "root.serve", 1)[0]
    assert isinstance(span, trace.Span)


def test_a_slow_request_is_exported_as_one_root_span_too() -> None:
    """A slow untraced request: its section is the root span, with the slow-lap ratio."""
    cap = capture(trace_every=0, run_id=RUN)
    _requests(cap, 13, slow=12)  # request 12: 2.0 s against a median of 0.1 s
    cap.lt.shutdown()
    tree = [(s["name"], s["parent"], s["step"], round(s["start"], 6)) for s in cap.span_tree()]
    assert tree == [("parse", "handle", 12, 1.2), ("handle", None, 12, 1.2)]
    root = cap.finished_spans()[-1]
    assert root.context is not None
    assert (root.context.trace_id, root.context.span_id) == step_ids(RUN, "root.serve", 12)
    attributes = dict(root.attributes or {})
    assert attributes["looptrace.slow_lap"] == 20.0
    assert attributes["thread.name"] == "MainThread"


def test_a_request_that_laps_its_timer_makes_later_steps_whole_laps() -> None:
    """record() inside a request makes the timer lapped: its next laps are spans of their own."""
    cap = capture(trace_every=1)
    serve = cap.lt.timer("serve")
    with serve.section("handle"):
        cap.clock.advance(0.1)
        serve.record()
        cap.clock.advance(0.1)
    serve.record()
    cap.clock.advance(0.1)
    serve.stop()
    names = [(s["name"], s["parent"]) for s in cap.span_tree()]
    assert names == [("handle", None), ("serve", None), ("serve", None)]
    assert cap.lt.health().misuse == 0
