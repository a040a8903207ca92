"""Spans read back from OTLP/JSON files: protobuf requests for replay, flat records for the rest.

Needs the `files` extra (protobuf and the OpenTelemetry protocol classes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from looptrace._export.otlp_json import ExportTraceServiceRequest, from_json
from looptrace._offline.progress import Progress
from looptrace._offline.reader import JsonLinesFile, Warn, read_all, reading
from looptrace._offline.step_spans import with_steps


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span as the offline commands use it; ids are hex, times epoch nanoseconds."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    path: str
    start_ns: int
    end_ns: int
    rank: int
    step: int | None
    thread_id: int | None
    thread_name: str | None
    host: str | None
    error: bool
    attributes: dict[str, Any]
    status_message: str = ""  # the error's description ("ValueError: ...") on an ERROR span

    @property
    def duration_ns(self) -> int:
        """Return the duration in nanoseconds (never negative)."""
        return max(0, self.end_ns - self.start_ns)


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

    A never-lapped timer's step, which has no span on the wire, is given back (`with_steps`).
    """
    spans: list[SpanRecord] = []
    with reading(files) as bar:
        for file, number, request in iter_requests(files, warn, bar):
            try:
                spans.extend(list(records_of(request)))
            except (ValueError, TypeError, RecursionError) as error:
                file.reject(number, f"holds a malformed span ({error})")
    return with_steps(spans)


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
                yield SpanRecord(
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    name=span.name,
                    path=_path(attributes.get("looptrace.path"), span.name),
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
                )


UNNAMED = "(unnamed)"


def _path(attribute: object, name: str) -> str:
    """Return the span's section path: `looptrace.path`, else its name; never empty."""
    if isinstance(attribute, str) and attribute.strip("."):
        return attribute
    return name if name.strip(".") else UNNAMED


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
