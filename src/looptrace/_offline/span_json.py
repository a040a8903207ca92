"""Spans read straight from OTLP/JSON objects, without protobuf: the offline commands' fast path.

OTLP/JSON as looptrace (and the OTLP file exporters) write it: hex trace and span ids,
64-bit integers as decimal strings (numbers accepted), enums as integers (names accepted).
Fields the commands do not use are not read, and unknown fields are ignored, as OTLP
receivers do. A field that is read and malformed raises `ValueError` or `TypeError`, and the
caller skips the line with a warning, as it would a line protobuf's parser rejects.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterator
from typing import Any

from looptrace._offline.span_record import SpanRecord, section_path

_INT64 = 2**63
_UINT64 = 2**64
_ERROR = 2  # STATUS_CODE_ERROR
_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def spans_of(request: object) -> Iterator[SpanRecord]:
    """Yield the flat records of the spans of one OTLP/JSON trace request object."""
    for item in _list(_object(request, "request"), "resourceSpans"):
        resource_spans = _object(item, "resourceSpans")
        resource = _attributes(_object(resource_spans.get("resource"), "resource"))
        rank = resource.get("looptrace.rank", 0)
        host = resource.get("host.name")
        writer = resource.get("service.instance.id")
        host = host if isinstance(host, str) else None
        writer = writer if isinstance(writer, str) else None
        for scope_spans in _list(resource_spans, "scopeSpans"):
            for span in _list(_object(scope_spans, "scopeSpans"), "spans"):
                yield _span(_object(span, "span"), rank, host, writer)


def _span(
    span: dict[str, Any], resource_rank: object, host: str | None, writer: str | None
) -> SpanRecord:
    attributes = _attributes(span)
    rank = attributes.get("looptrace.rank", resource_rank)
    step = attributes.get("looptrace.step")
    thread_id = attributes.get("thread.id")
    thread_name = attributes.get("thread.name")
    name = _string(_get(span, "name", ""), "name")
    status = _object(span.get("status"), "status")
    return SpanRecord(
        trace_id=_id(span.get("traceId")),
        span_id=_id(span.get("spanId")),
        parent_id=_id(span.get("parentSpanId")),
        name=name,
        path=section_path(attributes.get("looptrace.path"), name),
        start_ns=_uint64(_get(span, "startTimeUnixNano", 0), "startTimeUnixNano"),
        end_ns=_uint64(_get(span, "endTimeUnixNano", 0), "endTimeUnixNano"),
        rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else 0,
        step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        thread_id=thread_id
        if isinstance(thread_id, int) and not isinstance(thread_id, bool)
        else None,
        thread_name=thread_name if isinstance(thread_name, str) else None,
        host=host,
        error=_status_code(_get(status, "code", 0)) == _ERROR,
        attributes=attributes,
        status_message=_string(_get(status, "message", ""), "status message"),
        writer=writer,
    )


def _get(data: dict[str, Any], key: str, default: object) -> object:
    """Return `data[key]`, or `default` where it is absent or null (as protobuf reads null)."""
    value = data.get(key)
    return default if value is None else value


def _object(value: object, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{what} is not an object")
    return value


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{key} is not a list")
    return value


def _string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} is not a string")
    return value


def _id(value: object) -> str:
    """Return a trace or span id as lowercase hex ("" when absent); base64 as protobuf reads it."""
    if value is None or value == "":
        return ""
    text = _string(value, "an id")
    try:
        return bytes.fromhex(text).hex()
    except ValueError:
        return _bytes(text).hex()


def _bytes(text: str) -> bytes:
    """Return base64 (standard or URL-safe, padding optional) decoded, as protobuf's JSON does."""
    encoded = text.encode()
    return base64.urlsafe_b64decode(encoded + b"=" * (4 - len(encoded) % 4))


def _uint64(value: object, what: str) -> int:
    number = _integer(value, what)
    if not 0 <= number < _UINT64:
        raise ValueError(f"{what} is out of range")
    return number


def _integer(value: object, what: str) -> int:
    """Return a 64-bit integer written as a decimal string or a number."""
    if type(value) is str and len(value) < 40 and value.isdigit():  # the usual case, at once
        return int(value)
    if isinstance(value, bool):
        raise TypeError(f"{what} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 40:
        return int(value)
    raise ValueError(f"{what} is not an integer: {str(value)[:40]!r}")


def _status_code(value: object) -> int:
    if isinstance(value, str) and value.startswith("STATUS_CODE_"):
        return {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}.get(value, -1)
    return _integer(value, "status code")


def _attributes(data: dict[str, Any]) -> dict[str, Any]:
    """Return the `attributes` key-value list of an object as a plain dict."""
    found: dict[str, Any] = {}
    for pair in _list(data, "attributes"):
        if type(pair) is not dict:
            raise TypeError("an attribute is not an object")
        key = pair.get("key")
        if type(key) is not str:
            key = _string("" if key is None else key, "an attribute key")
        value = pair.get("value")
        if type(value) is dict and len(value) == 1:  # the usual case, at once
            text = value.get("stringValue")
            if type(text) is str:
                found[key] = text
                continue
            number = value.get("intValue")
            if type(number) is str and len(number) < 19 and number.isdigit():
                found[key] = int(number)
                continue
        found[key] = _value(value)
    return found


def _value(value: object) -> Any:  # noqa: PLR0911 - one return per kind of value
    """Return the Python value of an OTLP `AnyValue` object (None when it holds none)."""
    value = _object(value, "an attribute value")
    if "stringValue" in value:
        return _string(value["stringValue"], "stringValue")
    if "intValue" in value:
        number = _integer(value["intValue"], "intValue")
        if not -_INT64 <= number < _INT64:
            raise ValueError("intValue is out of range")
        return number
    if "boolValue" in value:
        flag = value["boolValue"]
        if not isinstance(flag, bool):
            raise TypeError("boolValue is not a boolean")
        return flag
    if "doubleValue" in value:
        return _double(value["doubleValue"])
    if "arrayValue" in value:
        items = _list(_object(value["arrayValue"], "arrayValue"), "values")
        return [_value(item) for item in items]
    if "kvlistValue" in value:
        return _attributes(
            {"attributes": _object(value["kvlistValue"], "kvlistValue").get("values")}
        )
    if "bytesValue" in value:
        return _bytes(_string(value["bytesValue"], "bytesValue"))
    return None


def _double(value: object) -> float:
    if isinstance(value, str) and value in _DOUBLES:
        return _DOUBLES[value]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError("doubleValue is not a number")
    return float(value)
