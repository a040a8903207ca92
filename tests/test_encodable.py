"""A name that cannot be encoded (a lone surrogate) is escaped by every output, never fatal.

The names come from another instrumentation's span on looptrace's provider: looptrace's own
timers refuse such names, but the aggregating processor counts every span, and the span
outputs export every sampled one.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace._export.encodable import encodable

from .helpers.otlp_server import OtlpReceiver
from .helpers.ports import LOCALHOST, free_port

ODD = os.fsdecode(b"shard-\xff")  # "shard-\udcff"
ESCAPED = "shard-\\xff"
ODD_VALUE = os.fsdecode(b"/data/\xfe.bin")


def _spans(lt: looptrace.Looptrace, provider: TracerProvider) -> None:
    """End a looptrace section, another instrumentation's odd span, and another section.

    `train` is never lapped: each section is a step's root span, with no span of `train`.
    """
    train = lt.timer("train")
    with train.section("before"):
        pass
    with provider.get_tracer("app").start_as_current_span(ODD) as span:
        span.set_attribute("file", ODD_VALUE)
    with train.section("after"):
        pass


def test_encodable_escapes_lone_surrogates_only() -> None:
    """A byte decoded by surrogateescape reads as backslash-x, another lone surrogate as -u."""
    assert [encodable(t) for t in ("plain", "naïve ✓", ODD, "a\ud800b")] == [
        "plain",
        "naïve ✓",
        ESCAPED,
        "a\\ud800b",
    ]


def test_prometheus_scrape_serves_every_path_with_an_odd_name() -> None:
    """The scrape answers 200 for all paths; the odd name is served escaped."""
    port = free_port()
    provider = TracerProvider()
    lt = looptrace.configure(tracer_provider=provider, prometheus=port, trace_every=1)
    _spans(lt, provider)
    lt.reset()
    with urllib.request.urlopen(f"http://{LOCALHOST}:{port}/metrics", timeout=5) as response:
        status, text = response.status, response.read().decode()
    lt.shutdown()
    assert status == 200
    paths = {
        line.split('looptrace_path="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("looptrace_section_duration_seconds_count")
    }
    assert paths == {
        "root.train",
        "root.train.before",
        "root.train.after",
        ESCAPED.replace("\\", "\\\\"),
    }


def test_span_file_line_with_an_odd_name_is_readable(tmp_path: Path) -> None:
    """Each span-file line parses as strict OTLP/JSON, every span in it, the odd text escaped."""
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    lt = looptrace.configure(tracer_provider=provider, trace_file=path, trace_every=1)
    _spans(lt, provider)
    lt.shutdown()
    spans = [
        span
        for line in path.read_text().splitlines()
        for resource in json_format.Parse(line, ExportTraceServiceRequest()).resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    assert {span.name for span in spans} == {"before", ESCAPED, "after"}
    (odd,) = [span for span in spans if span.name == ESCAPED]
    assert {a.key: a.value.string_value for a in odd.attributes} == {"file": "/data/\\xfe.bin"}
    assert lt.health().dropped_spans == 0


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_otlp_batch_with_an_odd_name_is_delivered_whole(protocol: str) -> None:
    """The receiver gets every span of the batch and every metric series, odd text escaped."""
    provider = TracerProvider()
    with OtlpReceiver(protocol) as receiver:
        lt = looptrace.configure(
            tracer_provider=provider,
            otlp_endpoint=receiver.endpoint,
            otlp_protocol=protocol,
            metrics_exporter="otlp",
            trace_every=1,
        )
        _spans(lt, provider)
        lt.reset()
        lt.shutdown()
        spans = list(receiver.spans)
        metrics = receiver.latest_metrics()["looptrace.section.duration"]
    assert {span["name"] for span in spans} == {"before", ESCAPED, "after"}
    (odd,) = [span for span in spans if span["name"] == ESCAPED]
    assert odd["attributes"] == {"file": "/data/\\xfe.bin"}
    assert {key for key in metrics if not key.startswith("_")} == {
        "root.train",
        "root.train.before",
        "root.train.after",
        ESCAPED,
    }
    assert lt.health() == looptrace.Health()
