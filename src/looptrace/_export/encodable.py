r"""Text every output can encode: lone surrogates escaped, so no name fails a whole batch.

A str holding a lone surrogate (`os.fsdecode(b"shard-\xff")` gives `"shard-\udcff"`) has no
UTF-8 encoding: protobuf refuses it (the whole OTLP batch), the Prometheus exposition cannot
be written (the whole scrape), and OTLP/JSON readers reject the line (the whole span-file
batch). looptrace refuses such names at its timer calls, but spans of other instrumentation
and the aggregating processor can still carry them; every output passes its text through
`encodable()`, which escapes each lone surrogate as Python shows the byte it stands for
(`shard-\xff`), or its code point when it stands for none (`\ud800`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Link, Status

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """Return `text` itself when it encodes as UTF-8, else with its lone surrogates escaped."""
    if text.isascii() or _utf8(text):
        return text
    return _SURROGATE.sub(_escape, text)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escape(match: re.Match[str]) -> str:
    point = ord(match.group())
    if 0xDC80 <= point <= 0xDCFF:  # a byte that `surrogateescape` decoded
        return f"\\x{point - 0xDC00:02x}"
    return f"\\u{point:04x}"


def encodable_spans(spans: Sequence[ReadableSpan]) -> Sequence[ReadableSpan]:
    """Return `spans`, with an escaped copy in place of each span holding unencodable text."""
    if all(_clean(span) for span in spans):
        return spans
    return [span if _clean(span) else _escaped(span) for span in spans]


def _clean_value(value: Any) -> bool:
    if isinstance(value, str):
        return value.isascii() or _utf8(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        return all(_clean_value(item) for item in value)
    return True


def _clean_attributes(attributes: Mapping[str, Any] | None) -> bool:
    return not attributes or all(
        _clean_value(key) and _clean_value(value) for key, value in attributes.items()
    )


def _clean(span: ReadableSpan) -> bool:
    return (
        _clean_value(span.name)
        and _clean_attributes(span.attributes)
        and _clean_value(span.status.description or "")
        and all(_clean_value(e.name) and _clean_attributes(e.attributes) for e in span.events)
        and all(_clean_attributes(link.attributes) for link in span.links)
    )


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        return tuple(_value(item) for item in value)
    return value


def _attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {encodable(key): _value(value) for key, value in (attributes or {}).items()}


def _escaped(span: ReadableSpan) -> ReadableSpan:
    status = span.status
    return ReadableSpan(
        name=encodable(span.name),
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_attributes(span.attributes),
        events=[
            Event(encodable(e.name), _attributes(e.attributes), e.timestamp) for e in span.events
        ],
        links=[Link(link.context, _attributes(link.attributes)) for link in span.links],
        kind=span.kind,
        status=Status(
            status.status_code,
            None if status.description is None else encodable(status.description),
        ),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
