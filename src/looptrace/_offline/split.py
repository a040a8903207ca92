"""Splits an OTLP trace request into requests a receiver accepts, spans kept whole and in order.

A receiver refuses a message over its limit: gRPC servers and the OpenTelemetry Collector's
OTLP/gRPC receiver (`max_recv_msg_size_mib`) take at most 4 MiB by default, and one line of a
span file (a batch of up to 512 spans with large attributes) can be more. Each part repeats
its spans' resource and instrumentation scope, so every span arrives as it was recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

from looptrace._export.otlp_json import ExportTraceServiceRequest

MAX_REQUEST_BYTES = 4 * 1024 * 1024  # gRPC's default limit on a received message
# Bytes a nested message adds to its parent beyond its own size: a field tag and a length
# (a varint of at most 5 bytes for anything under 4 GiB).
_FRAME = 6


@dataclass(frozen=True)
class Part:
    """One request to send, or (`request` None) one span too large to send alone."""

    request: ExportTraceServiceRequest | None
    spans: int
    size: int  # the request's size in bytes, or the oversized span's


def split_request(request: ExportTraceServiceRequest, limit: int) -> Iterator[Part]:
    """Yield parts of `request` of at most `limit` serialized bytes each, spans in order.

    A request under the limit is yielded as it is. A span that cannot fit in a request of
    `limit` bytes, even alone, is yielded as a `Part` without a request.
    """
    size = request.ByteSize()
    if size <= limit:
        yield Part(request, _span_count(request), size)
        return
    current = ExportTraceServiceRequest()
    used = spans = 0
    for resource_spans in request.resource_spans:
        resource_shell = ResourceSpans(
            resource=resource_spans.resource, schema_url=resource_spans.schema_url
        )
        resource_size = resource_shell.ByteSize() + _FRAME
        for scope_spans in resource_spans.scope_spans:
            scope_shell = ScopeSpans(scope=scope_spans.scope, schema_url=scope_spans.schema_url)
            scope_size = scope_shell.ByteSize() + _FRAME
            head = resource_size + scope_size  # a part that starts here repeats both
            target = None  # the scope in `current` that takes the next span
            for span in scope_spans.spans:
                span_size = span.ByteSize() + _FRAME
                if head + span_size > limit:  # alone over the limit: after what came before
                    if spans:
                        yield Part(current, spans, current.ByteSize())
                        current, used, spans, target = ExportTraceServiceRequest(), 0, 0, None
                    yield Part(None, 1, span.ByteSize())
                    continue
                extra = span_size if target is not None else head + span_size
                if spans and used + extra > limit:
                    yield Part(current, spans, current.ByteSize())
                    current, used, spans, target = ExportTraceServiceRequest(), 0, 0, None
                    extra = head + span_size
                if target is None:
                    resource = current.resource_spans.add()
                    resource.CopyFrom(resource_shell)
                    target = resource.scope_spans.add()
                    target.CopyFrom(scope_shell)
                target.spans.add().CopyFrom(span)
                used += extra
                spans += 1
    if spans:
        yield Part(current, spans, current.ByteSize())


def _span_count(request: ExportTraceServiceRequest) -> int:
    return sum(len(scope.spans) for res in request.resource_spans for scope in res.scope_spans)
