"""A test OTLP receiver (gRPC and HTTP, real protobuf wire format) with injectable faults.

It stores what it receives as plain dicts, can demand a header, serve TLS, answer trace
requests late or with a transient error (UNAVAILABLE / HTTP 503), be stopped and restarted on
the same port; `StalledServer` accepts connections and never answers.
"""

from __future__ import annotations

import gzip
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from .otlp_wire import attributes, metric_points
from .ports import LOCALHOST, free_port
from .tls import Tls
from .waiting import wait_until

__all__ = ["LOCALHOST", "OtlpReceiver", "StalledServer", "Tls", "free_port", "wait_until"]


class OtlpReceiver:
    """Receives OTLP traces and metrics over gRPC or HTTP/protobuf on 127.0.0.1.

    `keep_spans=False` only counts spans (`span_count`), for a receiver under sustained load.
    """

    def __init__(
        self,
        protocol: str,
        *,
        port: int = 0,
        tls: Tls | None = None,
        require: tuple[str, str] | None = None,
        keep_spans: bool = True,
    ) -> None:
        self.protocol = protocol
        self.port = port
        self.tls = tls
        self.require = require
        self.keep_spans = keep_spans
        self.spans: list[dict[str, Any]] = []
        self.span_count = 0
        self.trace_requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.metric_requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.rejected = 0
        self.failures = 0  # answer this many more trace requests with UNAVAILABLE / HTTP 503
        # answer this many more metric requests with INVALID_ARGUMENT / HTTP 400 (not retried)
        self.metric_failures = 0
        self.delay_s = 0.0  # wait this long before answering each trace request
        self.arrived = threading.Event()  # set when a trace request arrives
        self._lock = threading.Lock()
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        """Return the URL to configure looptrace with."""
        return f"{'https' if self.tls else 'http'}://{LOCALHOST}:{self.port}"

    def start(self) -> OtlpReceiver:
        """Listen (on the same port again after a `stop()`)."""
        if self.protocol == "grpc":
            self._start_grpc()
        else:
            self._start_http()
        return self

    def stop(self) -> None:
        """Stop listening; what was received stays."""
        if self._grpc is not None:
            self._grpc.stop(grace=None).wait()
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what arrived -----------------------------------------------------------------------

    def wait_for_spans(self, count: int, timeout: float = 10.0) -> bool:
        """Wait until at least `count` spans arrived."""
        return wait_until(lambda: len(self.spans) >= count, timeout)

    def wait_for_metrics(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0
    ) -> bool:
        """Wait until the latest metrics request, as `latest_metrics()`, satisfies `predicate`."""
        return wait_until(
            lambda: bool(self.metric_requests) and predicate(self.latest_metrics()), timeout
        )

    def latest_metrics(self) -> dict[str, Any]:
        """Return the last metrics request as `{metric: {series key: point dict}}`."""
        with self._lock:
            request = self.metric_requests[-1]
        result: dict[str, Any] = {}
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    result[metric.name] = metric_points(metric)
        return result

    def _accept(self, headers: dict[str, str]) -> bool:
        with self._lock:
            self.headers.append(headers)
            if self.require is not None and headers.get(self.require[0]) != self.require[1]:
                self.rejected += 1
                return False
        return True

    def _transient_failure(self) -> bool:
        """Note a trace request's arrival, wait `delay_s`; return whether to fail it."""
        self.arrived.set()
        if self.delay_s:
            time.sleep(self.delay_s)
        with self._lock:
            if self.failures > 0:
                self.failures -= 1
                return True
        return False

    def _metric_failure(self) -> bool:
        """Return whether to refuse this metrics request (counting down `metric_failures`)."""
        with self._lock:
            if self.metric_failures > 0:
                self.metric_failures -= 1
                return True
        return False

    def _add_traces(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        count = sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)
        if not self.keep_spans:
            with self._lock:
                self.span_count += count
            return
        spans = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        {
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex() or None,
                            "attributes": attributes(span.attributes),
                            "resource": resource,
                            "scope": scope_spans.scope.name,
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                        }
                    )
        with self._lock:
            self.trace_requests.append(request)
            self.spans.extend(spans)
            self.span_count += count

    def _add_metrics(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self._lock:
            self.metric_requests.append(request)

    # -- gRPC ------------------------------------------------------------------------------

    def _start_grpc(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC's name
                if not receiver._accept(dict(context.invocation_metadata())):
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")
                if receiver._transient_failure():
                    context.abort(grpc.StatusCode.UNAVAILABLE, "injected failure")
                receiver._add_traces(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC's name
                if not receiver._accept(dict(context.invocation_metadata())):
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")
                if receiver._metric_failure():
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "injected failure")
                receiver._add_metrics(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
        address = f"{LOCALHOST}:{self.port}"
        if self.tls is not None:
            credentials = grpc.ssl_server_credentials(
                [(self.tls.key.read_bytes(), self.tls.cert.read_bytes())]
            )
            self.port = server.add_secure_port(address, credentials)
        else:
            self.port = server.add_insecure_port(address)
        server.start()
        self._grpc = server

    # -- HTTP ------------------------------------------------------------------------------

    def _start_http(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                headers = {k.lower(): v for k, v in self.headers.items()}
                if not receiver._accept(headers):
                    self._answer(401, b"")
                    return
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    self._answer(415, b"")
                    return
                if self.path == "/v1/traces":
                    if receiver._transient_failure():
                        self._answer(503, b"")
                        return
                    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    receiver._add_traces(request)
                    reply = trace_service_pb2.ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    if receiver._metric_failure():
                        self._answer(400, b"")
                        return
                    metrics = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                    receiver._add_metrics(metrics)
                    reply = metrics_service_pb2.ExportMetricsServiceResponse()
                else:
                    self._answer(404, b"")
                    return
                self._answer(200, reply.SerializeToString())

            def _answer(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                """Keep the test output quiet."""

        server = ThreadingHTTPServer((LOCALHOST, self.port), Handler)
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls.cert, self.tls.key)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        # stop() waits for the serving loop's next poll: make it short, not the 0.5 s default
        threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
        self._http = server


class StalledServer:
    """Accepts TCP connections on 127.0.0.1 and never answers: a hung collector."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind((LOCALHOST, 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """Return the URL to configure looptrace with."""
        return f"http://{LOCALHOST}:{self.port}"

    def _accept(self) -> None:
        self._sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            self._held.append(conn)

    def close(self) -> None:
        """Stop accepting and drop every held connection."""
        self._stop.set()
        self._thread.join()
        for conn in self._held:
            conn.close()
        self._sock.close()
