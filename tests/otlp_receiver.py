"""A minimal OTLP trace receiver for tests: real OTLP/gRPC and OTLP/HTTP (protobuf) on 127.0.0.1.

It keeps every `ExportTraceServiceRequest` it accepts, with its headers, and can inject faults:
answer the next requests with UNAVAILABLE / HTTP 503, or take a while to answer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


class OtlpReceiver:
    """Both OTLP transports on free loopback ports; use as a context manager."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.failures = 0  # answer this many more requests with a transient error
        self.delay_s = 0.0
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        self._grpc = grpc.server(ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(self), self._grpc)
        grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.grpc_endpoint = f"http://127.0.0.1:{grpc_port}"
        self.http_endpoint = f"http://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        self._grpc.start()
        threading.Thread(target=self._http.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._grpc.stop(grace=None)

    def accept(self, request: ExportTraceServiceRequest, headers: dict[str, str]) -> bool:
        """Record a request unless a failure is due; return whether it was accepted."""
        self.arrived.set()
        if self.delay_s:
            threading.Event().wait(self.delay_s)
        with self._lock:
            if self.failures > 0:
                self.failures -= 1
                return False
            self.requests.append(request)
            self.headers.append(headers)
            return True

    def spans(self) -> Iterator[tuple[dict[str, Any], Span]]:
        """Yield `(resource attributes, span)` of every accepted span, in arrival order."""
        with self._lock:
            requests = list(self.requests)
        for request in requests:
            for resource_spans in request.resource_spans:
                resource = {kv.key: _plain(kv.value) for kv in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        yield resource, span


def _plain(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return None if which is None else getattr(value, which)


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(  # noqa: N802 - the generated protocol's name
        self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> ExportTraceServiceResponse:
        headers = {key: str(value) for key, value in context.invocation_metadata()}
        if not self._receiver.accept(request, headers):
            context.abort(grpc.StatusCode.UNAVAILABLE, "injected failure")
        return ExportTraceServiceResponse()


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path != "/v1/traces":
                self._reply(404, b"")
                return
            if self.headers.get("Content-Type") != "application/x-protobuf":
                self._reply(415, b"")
                return
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            headers = {key.lower(): value for key, value in self.headers.items()}
            if receiver.accept(request, headers):
                self._reply(200, ExportTraceServiceResponse().SerializeToString())
            else:
                self._reply(503, b"")

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Keep test output quiet."""

    return Handler
