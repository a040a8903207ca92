"""Spans read back from OTLP/JSON files: protobuf requests for replay, flat records for the rest.

Needs the `files` extra (protobuf and the OpenTelemetry protocol classes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from looptrace._export.otlp_json import ExportTraceServiceRequest, from_json
from looptrace._offline.duplicates import Once
from looptrace._offline.no_gc import paused_gc
from looptrace._offline.progress import Progress
from looptrace._offline.reader import JsonLinesFile, Warn, read_all, reading
from looptrace._offline.span_json import spans_of
from looptrace._offline.span_record import UNNAMED, SpanRecord, section_path
from looptrace._offline.step_spans import with_steps

__all__ = [
    "UNNAMED",
    "SpanRecord",
    "attributes_of",
    "iter_requests",
    "load_spans",
    "records_of",
    "span_count",
]


def iter_requests(
    files: Sequence[JsonLinesFile], warn: Warn, bar: Progress
) -> Iterator[tuple[JsonLinesFile, int, ExportTraceServiceRequest]]:
    """Yield `(file, line number, request)` for every readable span line.

    `warn` is kept for callers that pass it; a line that is not an OTLP/JSON request is
    reported by its file (a few lines by number, then a count).
    """
    del warn
    for file, number, record in read_all(files, bar):
        try:
            request = from_json(record)
        except (ValueError, TypeError, RecursionError) as error:
            file.reject(number, f"is not a valid OTLP/JSON request ({error})")
            continue
        yield file, number, request


def span_count(request: ExportTraceServiceRequest) -> int:
    """Return the number of spans in a request."""
    return sum(len(scope.spans) for res in request.resource_spans for scope in res.scope_spans)


def load_spans(files: Sequence[JsonLinesFile], warn: Warn) -> list[SpanRecord]:
    """Return every span of the span files, in file order, never-lapped timers' steps last.

    Lines are read straight from their JSON objects (`span_json`), not through protobuf; a
    line that is not an OTLP/JSON trace request is skipped with a warning. A never-lapped
    timer's step, which has no span on the wire, is given back (`with_steps`). A span read
    twice counts once, and a rank written by two processes is named (`duplicates.Once`),
    each with one warning.
    """
    spans: list[SpanRecord] = []
    once = Once("span")
    with reading(files) as bar, paused_gc():
        for file, number, record in read_all(files, bar):
            try:
                read = list(spans_of(record))
            except (ValueError, TypeError, RecursionError) as error:
                file.reject(number, f"is not a valid OTLP/JSON request ({error})")
                continue
            spans += [
                span for span in read if once.first(_key(span), span.rank, span.writer, span.host)
            ]
    for line in once.warnings():
        warn(line)
    return with_steps(spans)


def _key(span: SpanRecord) -> tuple[str | None, str, str] | None:
    """Return what tells a span from every other: its writer, trace and span ids."""
    return (span.writer, span.trace_id, span.span_id) if span.span_id.strip("0") else None


def records_of(request: ExportTraceServiceRequest) -> Iterator[SpanRecord]:
    """Yield the flat records of the spans in one request."""
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attributes = attributes_of(span.attributes)
                rank = attributes.get("looptrace.rank", resource.get("looptrace.rank", 0))
                step = attributes.get("looptrace.step")
                thread_id = attributes.get("thread.id")
                thread_name = attributes.get("thread.name")
                host = resource.get("host.name")
                writer = resource.get("service.instance.id")
                yield SpanRecord(
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    name=span.name,
                    path=section_path(attributes.get("looptrace.path"), span.name),
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    rank=rank if isinstance(rank, int) else 0,
                    step=step if isinstance(step, int) else None,
                    thread_id=thread_id if isinstance(thread_id, int) else None,
                    thread_name=thread_name if isinstance(thread_name, str) else None,
                    host=host if isinstance(host, str) else None,
                    error=span.status.code == Status.STATUS_CODE_ERROR,
                    attributes=attributes,
                    status_message=span.status.message,
                    writer=writer if isinstance(writer, str) else None,
                )


def attributes_of(pairs: Sequence[KeyValue]) -> dict[str, Any]:
    """Return OTLP key-value pairs as a plain dict."""
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, which)
