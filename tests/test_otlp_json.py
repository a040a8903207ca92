"""The OTLP/JSON encoder: what the protobuf encoder and its JSON mapping give, built directly."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.span import TraceFlags, TraceState

from looptrace._export.otlp_json import encode_line, encode_request, from_json, to_json

from .helpers.examples import examples

SCALARS = st.one_of(
    st.booleans(),
    st.text(max_size=8),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(st.booleans(), max_size=3),
    st.lists(st.text(max_size=4), max_size=3),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
    st.lists(st.floats(allow_nan=False), max_size=3),
)
ATTRIBUTES = st.dictionaries(st.text(min_size=1, max_size=6), VALUES, max_size=5)


def _spans(attributes: dict[str, object]) -> list[ReadableSpan]:
    """Return spans with every feature the encoder handles, `attributes` on each part."""
    memory = InMemorySpanExporter()
    resource = Resource.create({"service.name": "svc", **attributes}, schema_url="https://s/1")
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("scope", "1.2", schema_url="https://s/2")
    other = provider.get_tracer("other")
    remote = SpanContext(
        trace_id=0x1234,
        span_id=0x5678,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("k", "v"), ("a", "b")]),
    )
    with tracer.start_as_current_span(
        "outer",
        context=trace.set_span_in_context(NonRecordingSpan(remote)),
        kind=SpanKind.SERVER,
        attributes=attributes,
        links=[Link(remote, attributes), Link(remote)],
    ) as outer:
        outer.add_event("tick", attributes, timestamp=123)
        outer.add_event("")
        with other.start_as_current_span("") as inner:
            inner.set_status(Status(StatusCode.ERROR, "broke"))
        with tracer.start_as_current_span("ok") as done:
            done.set_status(Status(StatusCode.OK))
    return list(memory.get_finished_spans())


def _normal(data: object) -> object:
    """Return `data` with NaN as a string, so equal structures compare equal."""
    return json.loads(json.dumps(data))


@settings(max_examples=examples(60), deadline=None)
@given(ATTRIBUTES)
def test_direct_encoding_equals_the_protobuf_json_mapping(attributes: dict[str, object]) -> None:
    """Resources, scopes, kinds, links, events, statuses, remote parents and every value type."""
    spans = _spans(attributes)
    assert _normal(encode_request(spans)) == _normal(to_json(encode_spans(spans)))


def test_a_line_reads_back_as_the_protobuf_request() -> None:
    """A line parses to exactly the request the SDK's protobuf encoder builds."""
    spans = _spans({"x": 1.5, "n": math.inf, "tags": ["a", "b"]})
    assert from_json(json.loads(encode_line(spans))) == encode_spans(spans)
