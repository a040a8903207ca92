"""OTLP/JSON spans read without protobuf: the same records as the protobuf reader, or a refusal."""

from __future__ import annotations

import copy
import functools
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Verbosity, given, settings
from hypothesis import strategies as st

from looptrace._export.otlp_json import from_json
from looptrace._offline.span_json import spans_of
from looptrace._offline.span_record import SpanRecord
from looptrace._offline.span_records import records_of

from .helpers.examples import examples
from .helpers.runs import record_run

HOSTILE = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            -1,
            0,
            2**64,
            2**63,
            -(2**63) - 1,
            1e300,
            math.inf,
            math.nan,
            "",
            "x",
            "ff" * 8,
            "0",
            "12",
            "-5",
            "1e3",
            "NaN",
            "Infinity",
            "STATUS_CODE_ERROR",
            [],
            {},
            [[[]]],
            {"a": 1},
            {"stringValue": 3},
            {"intValue": "99999999999999999999"},
        ]
    ),
    st.integers(),
    st.floats(),
    st.text(max_size=4),
)
VALUES = [
    {"stringValue": "x"},
    {"intValue": "-9223372036854775808"},
    {"intValue": 7},
    {"doubleValue": 1.5},
    {"doubleValue": "NaN"},
    {"boolValue": False},
    {"bytesValue": "AAEC"},
    {"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "a"}]}},
    {"arrayValue": {}},
    {"kvlistValue": {"values": [{"key": "k", "value": {"doubleValue": 2}}]}},
    {},
]


@functools.cache
def _lines() -> tuple[str, ...]:
    """Return the span lines of a recorded run, with every kind of attribute value added."""
    run = record_run(Path(tempfile.mkdtemp(prefix="looptrace-span-json-")))
    lines = []
    for text in run.span_file.read_text().splitlines():
        record = json.loads(text)
        span = record["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        span["attributes"] += [{"key": f"v{i}", "value": v} for i, v in enumerate(VALUES)]
        span["status"] = {"code": 2, "message": "ValueError: bad"}
        lines.append(json.dumps(record))
    return tuple(lines)


def _same(records: list[SpanRecord], others: list[SpanRecord]) -> bool:
    """Return whether two lists of records are equal, NaN equal to NaN."""
    return json.dumps([repr(r) for r in records]) == json.dumps([repr(r) for r in others])


def _protobuf(record: dict[str, Any]) -> list[SpanRecord] | None:
    try:
        return list(records_of(from_json(copy.deepcopy(record))))
    except (ValueError, TypeError, RecursionError, OverflowError):
        return None


def _direct(record: dict[str, Any]) -> list[SpanRecord] | None:
    try:
        return list(spans_of(record))
    except (ValueError, TypeError, RecursionError):
        return None


def test_real_lines_give_the_records_of_the_protobuf_reader() -> None:
    """Every line of a recorded run, all attribute kinds and an error status: equal records."""
    for line in _lines():
        record = json.loads(line)
        direct, protobuf = _direct(record), _protobuf(record)
        assert direct is not None and protobuf is not None
        assert _same(direct, protobuf)


_FIELDS = ["traceId", "spanId", "parentSpanId", "name", "startTimeUnixNano", "endTimeUnixNano"]


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=False,
    verbosity=Verbosity.quiet,
    derandomize=True,
)
@given(st.data())
def test_a_mutated_line_is_read_alike_or_refused(data: st.DataObject) -> None:
    """A field set to a hostile value: where both readers take the line, the same records.

    The direct reader may refuse what protobuf's lenient JSON parser takes (`true` as an enum,
    a URL-safe base64 id): no OTLP writer writes those. It never raises anything else.
    """
    record = json.loads(data.draw(st.sampled_from(_lines())))
    span = data.draw(st.sampled_from(record["resourceSpans"][0]["scopeSpans"][0]["spans"]))
    where = data.draw(st.sampled_from([*_FIELDS, "status.code", "status.message", "attribute"]))
    value = data.draw(HOSTILE)
    if where == "attribute":
        attribute = data.draw(st.sampled_from(span["attributes"]))
        kind = data.draw(st.sampled_from([*attribute["value"], "value"]))
        if kind == "value":
            attribute["value"] = value
        else:
            attribute["value"][kind] = value
    elif where.startswith("status."):
        span.setdefault("status", {})[where.split(".")[1]] = value
    else:
        span[where] = value
    protobuf = _protobuf(record)
    direct = _direct(record)  # raises nothing but ValueError, TypeError, RecursionError
    if protobuf is not None and direct is not None:
        assert _same(direct, protobuf), (where, value)
