"""`looptrace replay`: recorded spans reach a real OTLP receiver exactly as they were recorded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from looptrace._cli import main
from looptrace._export.files import OtlpJsonFileExporter
from looptrace._export.otlp_json import encode_line
from looptrace._offline import replay as _replay

from .helpers.otlp_server import OtlpReceiver
from .helpers.runs import record_run
from .helpers.tls import Tls
from .helpers.waiting import wait_until


@pytest.fixture
def protocol() -> str:
    """Return the OTLP transport of `receiver`; tests parametrize it to cover both."""
    return "grpc"


@pytest.fixture
def receiver(protocol: str) -> Iterator[OtlpReceiver]:
    """Yield an OTLP receiver for `protocol` on a free loopback port."""
    with OtlpReceiver("grpc" if protocol == "grpc" else "http") as started:
        yield started


def _recorded(spans: list[ReadableSpan]) -> dict[str, dict[str, Any]]:
    """Return the produced spans by hex span id: trace, parent, name, attributes, times."""
    result = {}
    for span in spans:
        assert span.context is not None
        result[f"{span.context.span_id:016x}"] = {
            "trace_id": f"{span.context.trace_id:032x}",
            "parent": f"{span.parent.span_id:016x}" if span.parent else "",
            "name": span.name,
            "attributes": dict(span.attributes or {}),
            "start": span.start_time,
            "end": span.end_time,
        }
    return result


def _received(receiver: OtlpReceiver) -> dict[str, dict[str, Any]]:
    """Return the received spans by hex span id, in the shape of `_recorded`."""
    result = {}
    for span in receiver.spans:
        result[span["span_id"]] = {
            "trace_id": span["trace_id"],
            "parent": span["parent"] or "",
            "name": span["name"],
            "attributes": span["attributes"],
            "start": span["start"],
            "end": span["end"],
        }
    return result


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_round_trip_keeps_ids_parents_names_attributes_and_times(
    protocol: str,
    receiver: OtlpReceiver,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Spans → file → replay arrive unchanged, each exactly once, with the resource."""
    run = record_run(tmp_path, data_ms=(10, 20, 30, 40, 50, 60))
    endpoint = receiver.endpoint
    code = main(
        [
            "replay",
            str(run.span_file),
            "--endpoint",
            endpoint,
            "--protocol",
            protocol,
            "--header",
            "x-mlflow-experiment-id=7",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert len(receiver.trace_requests) == len(run.span_file.read_text().splitlines())
    assert len(receiver.spans) == len(run.spans) == 18
    assert _received(receiver) == _recorded(run.spans)
    resources = {span["resource"]["looptrace.rank"] for span in receiver.spans}
    assert resources == {0}
    assert receiver.headers
    assert all(headers["x-mlflow-experiment-id"] == "7" for headers in receiver.headers)
    lines = len(receiver.trace_requests)
    assert out == f"replayed 18 spans in {lines} requests to {endpoint} ({protocol})\n"


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_transient_failures_are_retried(
    protocol: str,
    receiver: OtlpReceiver,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two UNAVAILABLE / 503 answers in a row are retried; every span arrives once."""
    monkeypatch.setattr(_replay, "FIRST_DELAY_S", 0.01)
    run = record_run(tmp_path)
    receiver.failures = 2
    code = main(
        ["replay", str(run.span_file), "--endpoint", receiver.endpoint, "--protocol", protocol]
    )
    assert code == 0, capsys.readouterr()
    assert len(receiver.spans) == len(run.spans)
    assert _received(receiver) == _recorded(run.spans)
    assert receiver.failures == 0


def test_unreachable_collector_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collector that never answers: a one-line error, exit 1, and how much was sent."""
    run = record_run(tmp_path)
    with socket.socket() as probe:  # a free port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setattr(_replay, "FIRST_DELAY_S", 0.01)
    code = main(["replay", str(run.span_file), "--endpoint", endpoint])
    captured = capsys.readouterr()
    assert code == 1
    (error,) = captured.err.splitlines()
    assert error.startswith(f"looptrace replay: error: {endpoint}/v1/traces unreachable (")
    assert captured.out == f"sent 0 spans in 0 requests to {endpoint} (http/protobuf); stopped\n"


def test_interrupt_reports_exactly_what_was_sent(receiver: OtlpReceiver, tmp_path: Path) -> None:
    """Ctrl-C stops after the request in flight; the printed count is what arrived."""
    run = record_run(tmp_path / "run", data_ms=[10] * 10)
    one_per_line = tmp_path / "one-per-line.jsonl"
    exporter = OtlpJsonFileExporter(one_per_line)
    for span in run.spans:
        exporter.export([span])
    exporter.shutdown()
    receiver.delay_s = 0.2
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "looptrace",
            "replay",
            str(one_per_line),
            "--endpoint",
            receiver.endpoint,
            "--protocol",
            "grpc",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert receiver.arrived.wait(30)
    assert wait_until(lambda: len(receiver.trace_requests) >= 3, 30)  # mid-replay
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    sent = len(receiver.trace_requests)
    assert proc.returncode == 130, err
    assert 0 < sent < len(run.spans)
    assert out.startswith(f"interrupted: sent {sent} spans in {sent} requests (through ")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "case",
    [
        (
            ["--timeout", "-1"],
            {},
            "--timeout: expected a number of seconds > 0 and <= 3600 (the Python exporters read "
            "seconds, not milliseconds), got -1.0",
        ),
        (["--timeout", "nan"], {}, "--timeout: expected a number of seconds > 0"),
        (["--endpoint", "http://[::1"], {}, "--endpoint: malformed endpoint 'http://[::1'"),
        (
            ["--header", "authorization=Bearer s3cr3t\r\n"],
            {},
            "--header: the value of header 'authorization' holds a control character",
        ),
        (
            ["--header", "authorization=Bearer s3cr3té"],
            {},
            "--header: the value of header 'authorization' holds a control character",
        ),
        (
            [],
            {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20s3cr3t%0A"},
            "OTEL_EXPORTER_OTLP_HEADERS: the value of header 'authorization'",
        ),
        (["--header", "novalue"], {}, "--header: cannot parse item 1 of the header list"),
        ([], {"OTEL_EXPORTER_OTLP_TIMEOUT": "1e300"}, "OTEL_EXPORTER_OTLP_TIMEOUT: expected"),
        (
            [],
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_PROTOCOL: unknown protocol 'http/json'",
        ),
    ],
)
def test_bad_options_are_one_line_errors_as_configure_would_say(
    case: tuple[list[str], dict[str, str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Replay parses with configure()'s parser: the same rejections, naming the option."""
    options, environ, error = case
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    run = record_run(tmp_path)
    argv = ["replay", str(run.span_file), *options]
    if "--endpoint" not in options:
        argv += ["--endpoint", "http://127.0.0.1:9"]
    code = main(argv)
    captured = capsys.readouterr()
    assert (code, captured.out) == (1, "")
    (line,) = captured.err.splitlines()
    assert line.startswith(f"looptrace replay: error: {error}")
    assert "s3cr3t" not in captured.err


def test_replay_accepts_exactly_what_configure_accepts(tmp_path: Path) -> None:
    """For the same settings, replay and configure() resolve the same traces exporter."""
    from looptrace._export.settings import ExportOptions, resolve

    environ = {
        "OTEL_EXPORTER_OTLP_HEADERS": "a=1,b=x%20y",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2.5",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    configured = resolve(
        ExportOptions(otlp_endpoint="http://c:4317", otlp_headers={"b": "z"}),
        environ,
        owns_traces=True,
        owns_metrics=False,
    ).traces
    replayed = _replay.replay_settings("http://c:4317", None, ["b=z"], None, environ)
    assert replayed == configured


class _Answer:
    """A one-shot TCP server answering every connection with fixed bytes (a broken peer)."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.endpoint = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(1 << 20)
                conn.sendall(self.payload)

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello\x00world",
            "/v1/traces answered HTTP 200 with a body that is not an OTLP response",
        ),
        (
            b"\x00\xffGARBAGE\r\n" + b"line\n" * 50,
            "/v1/traces unreachable (BadStatusLine: ",
        ),
    ],
)
def test_a_broken_collector_reply_is_a_one_line_error(
    payload: bytes,
    error: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 200 with a body that is not protobuf, or a garbage status line: one line, exit 1."""
    monkeypatch.setattr(_replay, "FIRST_DELAY_S", 0.01)
    run = record_run(tmp_path)
    server = _Answer(payload)
    try:
        code = main(["replay", str(run.span_file), "--endpoint", server.endpoint])
    finally:
        server.close()
    captured = capsys.readouterr()
    assert code == 1
    (line,) = captured.err.splitlines()
    assert line.startswith(f"looptrace replay: error: {server.endpoint}{error}")
    assert len(line) < 300


class _FaultyHttp:
    """A real HTTP server (`http.server`) that reads each POST whole, then misbehaves.

    `trickle-status`: sends its status line one byte per 0.2 s, for ever; `trickle-body`: a
    200 whose protobuf body comes one byte per 0.2 s; `endless`: a 200 whose body never ends.
    """

    def __init__(self, mode: str) -> None:
        self.sent = 0  # body bytes written before the client went away
        self.closing = threading.Event()
        fault = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    if mode == "trickle-status":
                        fault.trickle(self.wfile, b"HTTP/1.1 200 OK\r\n" * 1000)
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.end_headers()
                    if mode == "trickle-body":
                        fault.trickle(self.wfile, b"\x00" * 100_000)
                    else:
                        while not fault.closing.is_set():
                            self.wfile.write(b"\x00" * 65536)
                            fault.sent += 65536
                except OSError:
                    return  # the client cut the connection: what a bound does

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def trickle(self, out: Any, data: bytes) -> None:
        for byte in data:
            if self.closing.wait(0.2):
                return
            out.write(bytes([byte]))
            out.flush()

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


def _replay_guarded(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int | None, str, str]:
    """Run `looptrace replay` with a hang guard: None as the code if it is still running."""
    code: list[int] = []
    worker = threading.Thread(target=lambda: code.append(main(["replay", *args])), daemon=True)
    worker.start()
    worker.join(timeout=90)  # a hang guard, not a measure of speed
    captured = capsys.readouterr()
    return (code[0] if code else None), captured.out, captured.err


@pytest.mark.parametrize("mode", ["trickle-status", "trickle-body"])
def test_a_trickling_server_is_cut_at_the_timeout(
    mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply trickling one byte at a time is cut when the whole request reaches --timeout."""
    monkeypatch.setattr(_replay, "FIRST_DELAY_S", 0.01)
    monkeypatch.setattr(_replay, "ATTEMPTS", 2)
    run = record_run(tmp_path)
    server = _FaultyHttp(mode)
    try:
        args = [str(run.span_file), "--endpoint", server.endpoint, "--timeout", "1"]
        code, out, err = _replay_guarded(args, capsys)
    finally:
        server.close()
    assert code == 1, "replay still running: the timeout does not bound the request"
    assert err == (
        f"looptrace replay: error: {server.endpoint}/v1/traces unreachable "
        "(RequestTimeoutError: no complete reply within 1 s)\n"
    )
    assert out == f"sent 0 spans in 0 requests to {server.endpoint} (http/protobuf); stopped\n"


def test_an_endless_reply_body_is_read_only_up_to_a_small_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 200 whose body never ends: one line naming the limit, after a bounded read."""
    run = record_run(tmp_path)
    server = _FaultyHttp("endless")
    try:
        args = [str(run.span_file), "--endpoint", server.endpoint, "--timeout", "30"]
        code, out, err = _replay_guarded(args, capsys)
        sent = server.sent
    finally:
        server.close()
    assert code == 1, "replay still running: the reply body is read without a bound"
    assert err == (
        f"looptrace replay: error: {server.endpoint}/v1/traces answered with a reply body "
        "over 64 KiB (is the endpoint an OTLP receiver?)\n"
    )
    assert out.startswith("sent 0 spans in 0 requests")
    assert sent < 64 * 1024 * 1024  # what socket buffers hold, not the unbounded stream


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_replay_over_tls_with_the_certificate_of_the_environment(
    protocol: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A TLS receiver whose CA is OTEL_EXPORTER_OTLP_CERTIFICATE gets every span."""
    tls = Tls.generate(tmp_path)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tls.cert))
    run = record_run(tmp_path)
    with OtlpReceiver("grpc" if protocol == "grpc" else "http", tls=tls) as receiver:
        args = [str(run.span_file), "--endpoint", receiver.endpoint, "--protocol", protocol]
        assert main(["replay", *args]) == 0, capsys.readouterr()
        assert _received(receiver) == _recorded(run.spans)


def _spans(count: int, payload_bytes: int, name: str = "load") -> list[ReadableSpan]:
    """Return `count` finished SDK spans, each with an attribute of `payload_bytes` bytes."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("looptrace-test")
    for index in range(count):
        with tracer.start_as_current_span(f"{name}-{index}") as span:
            span.set_attribute("payload", "x" * payload_bytes)
    provider.shutdown()
    return list(memory.get_finished_spans())


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_line_over_the_receivers_limit_is_split_and_every_file_sent(
    protocol: str, receiver: OtlpReceiver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 4.75 MB line reaches a receiver with gRPC's 4 MiB limit in parts; later files too."""
    big, small = _spans(600, 8000), _spans(3, 10, name="after")
    big_file, small_file = tmp_path / "big.jsonl", tmp_path / "small.jsonl"
    big_file.write_bytes(encode_line(big))
    small_file.write_bytes(encode_line(small))
    args = [str(big_file), str(small_file), "--endpoint", receiver.endpoint]
    assert main(["replay", *args, "--protocol", protocol]) == 0, capsys.readouterr()
    sizes = [request.ByteSize() for request in receiver.trace_requests]
    assert sum(sizes) > 4_750_000
    assert max(sizes) <= 4 * 1024 * 1024
    assert len(sizes) == 3  # two parts of the big line, the small line whole
    assert _received(receiver) == _recorded(big + small)
    assert capsys.readouterr().out == (
        f"replayed 603 spans in 3 requests to {receiver.endpoint} ({protocol})\n"
    )


def test_a_span_too_large_to_send_is_reported_and_the_rest_sent(
    receiver: OtlpReceiver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One span over the limit on its own: a warning naming it, exit 1, every other span sent."""
    before, huge, after = _spans(2, 10), _spans(1, 5_000_000, name="huge"), _spans(2, 10, "z")
    spans = tmp_path / "spans.jsonl"
    spans.write_bytes(encode_line(before + huge + after))
    later = tmp_path / "later.jsonl"
    later.write_bytes(encode_line(_spans(1, 10, name="later")))
    args = [str(spans), str(later), "--endpoint", receiver.endpoint, "--protocol", "grpc"]
    code = main(["replay", *args])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.startswith(f"looptrace replay: warning: {spans} line 1: a span of 5000")
    assert captured.err.endswith(
        " bytes is over the request limit of 4194304 bytes (--max-request-bytes); not sent\n"
    )
    assert len(captured.err.splitlines()) == 1
    assert sorted(span["name"] for span in receiver.spans) == [
        "later-0", "load-0", "load-1", "z-0", "z-1"
    ]  # fmt: skip
    assert captured.out == (
        f"replayed 5 spans in 3 requests to {receiver.endpoint} (grpc); 1 span not delivered "
        "(each refusal is named above)\n"
    )
