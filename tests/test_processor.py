"""The aggregating span processor folds spans of any instrumentation; looptrace's count once."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from looptrace.testing import Capture


def test_foreign_spans_are_aggregated_with_self_time(cap: Capture) -> None:
    """Spans of another tracer on the same provider are aggregated by name, self time included."""
    tracer = cap.tracer_provider.get_tracer("my.app")
    base = 1_767_225_600_000_000_000
    parent = tracer.start_span("load", start_time=base)
    child = tracer.start_span(
        "decode", context=trace.set_span_in_context(parent), start_time=base + 100
    )
    child.set_status(Status(StatusCode.ERROR))
    child.end(end_time=base + 400)
    parent.end(end_time=base + 1000)
    snap = cap.lt.reset()
    assert {
        p: (s.count, round(s.total * 1e9), round(s.self_time * 1e9), s.errors)
        for p, s in snap.items()
    } == {
        "load": (1, 1000, 700, 0),
        "decode": (1, 300, 300, 1),
    }


def test_looptrace_spans_are_counted_once(cap: Capture) -> None:
    """Looptrace's own spans are folded by the timer, not again by the processor."""
    train = cap.lt.timer("training")
    train.record("forward")
    cap.clock.advance(1.0)
    train.stop()
    assert len(cap.finished_spans()) == 2
    assert {p: s.count for p, s in cap.lt.reset().items()} == {
        "root.training": 1,
        "root.training.forward": 1,
    }


def test_foreign_span_with_looptrace_path_attribute_uses_it(cap: Capture) -> None:
    """A foreign span that sets looptrace.path is aggregated under that path."""
    tracer = cap.tracer_provider.get_tracer("other")
    span = tracer.start_span("x", attributes={"looptrace.path": "root.custom.x"}, start_time=0)
    span.end(end_time=5)
    assert list(cap.lt.reset()) == ["root.custom.x"]
