"""Splitting a trace request under a size limit: every span once, in order, each part small."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from looptrace._export.otlp_json import ExportTraceServiceRequest
from looptrace._offline.split import split_request

from .helpers.examples import examples

LIMIT = 4096

# resources -> scopes -> span payload sizes
shapes = st.lists(
    st.lists(st.lists(st.integers(0, 6000), max_size=12), min_size=1, max_size=3),
    min_size=1,
    max_size=3,
)


def _request(shape: list[list[list[int]]]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for r, scopes in enumerate(shape):
        resource = request.resource_spans.add(schema_url=f"r{r}")
        resource.resource.attributes.append(
            KeyValue(key="service.name", value=AnyValue(string_value=f"service-{r}"))
        )
        for s, sizes in enumerate(scopes):
            scope = resource.scope_spans.add()
            scope.scope.name = f"scope-{r}-{s}"
            for index, size in enumerate(sizes):
                span = scope.spans.add(name=f"{r}.{s}.{index}", span_id=bytes(8))
                span.attributes.append(KeyValue(key="p", value=AnyValue(string_value="x" * size)))
    return request


def _flat(request: ExportTraceServiceRequest) -> list[tuple[str, str, bytes]]:
    """Return each span with its resource and scope, in order."""
    return [
        (resource.resource.SerializeToString(), scope.scope.name, span.SerializeToString())
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


@settings(max_examples=examples(200), deadline=None)
@given(shapes)
def test_parts_hold_every_span_once_in_order_under_the_limit(shape: list[list[list[int]]]) -> None:
    """Parts stay under the limit and, with the spans too large alone, give back the request."""
    request = _request(shape)
    parts = list(split_request(request, LIMIT))
    sent = [part for part in parts if part.request is not None]
    assert all(part.size == part.request.ByteSize() <= LIMIT for part in sent if part.request)
    rebuilt: list[tuple[str, str, bytes]] = []
    for part in parts:
        if part.request is None:
            rebuilt.append(("too large", "", b""))
        else:
            assert part.spans == len(_flat(part.request))
            rebuilt.extend(_flat(part.request))
    expected = _flat(request)
    assert len(rebuilt) == len(expected)
    for got, want in zip(rebuilt, expected, strict=True):
        assert got == want or (got[0] == "too large" and len(want[2]) + 200 > LIMIT)
    if request.ByteSize() <= LIMIT:
        assert [part.request for part in parts] == [request]
