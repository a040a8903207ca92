"""The OTLP/JSON encoding of spans, on top of the OpenTelemetry protobuf encoder.

Spans are encoded by `opentelemetry-exporter-otlp-proto-common` into the protobuf
`ExportTraceServiceRequest` the OTLP exporters send, and protobuf's JSON mapping turns that into
JSON. OTLP/JSON differs from the plain protobuf JSON mapping in two ways, both handled here:
trace and span ids are hex strings (not base64), and enums are integers (not names). Keys are
lowerCamelCase and 64-bit integers are decimal strings, as the mapping writes them.

This module needs the `files` extra (`pip install 'looptrace[files]'`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["ExportTraceServiceRequest", "encode_line", "from_json", "to_json"]

_SPAN_IDS = ("traceId", "spanId", "parentSpanId")
_LINK_IDS = ("traceId", "spanId")


def encode_line(spans: Sequence[ReadableSpan]) -> bytes:
    """Return one export batch of SDK spans as one OTLP/JSON line (ending in a newline)."""
    return json.dumps(to_json(encode_spans(spans)), separators=(",", ":")).encode() + b"\n"


def to_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """Return the OTLP/JSON object of a protobuf request."""
    data = json_format.MessageToDict(request, use_integers_for_enums=True)
    _convert_ids(data, _base64_to_hex)
    return data


def from_json(data: dict[str, Any]) -> ExportTraceServiceRequest:
    """Return the protobuf request of an OTLP/JSON object (whose ids are converted in place).

    Fields unknown to this version of the protocol are ignored, as OTLP receivers do.

    Raises:
        ValueError: the object is not an OTLP/JSON trace request.

    """
    _convert_ids(data, _hex_to_base64)
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
    except json_format.ParseError as error:
        raise ValueError(str(error).splitlines()[0]) from None
    return request


def _convert_ids(data: dict[str, Any], convert: Callable[[str], str]) -> None:
    for resource_spans in _items(data, "resourceSpans"):
        for scope_spans in _items(resource_spans, "scopeSpans"):
            for span in _items(scope_spans, "spans"):
                _convert_fields(span, _SPAN_IDS, convert)
                for link in _items(span, "links"):
                    _convert_fields(link, _LINK_IDS, convert)


def _items(data: object, key: str) -> list[Any]:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, list) else []


def _convert_fields(data: object, keys: tuple[str, ...], convert: Callable[[str], str]) -> None:
    if not isinstance(data, dict):
        return
    for key in keys:
        value = data.get(key)
        if isinstance(value, str) and value:
            data[key] = convert(value)


def _base64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _hex_to_base64(value: str) -> str:
    """Decode a hex id; a value that is not hex is left for the protobuf parser to judge."""
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return value
    return base64.b64encode(raw).decode()
