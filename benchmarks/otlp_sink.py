"""A local OTLP/gRPC trace receiver for the benchmark: counts spans, or stalls on purpose."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class _Service(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, stall: threading.Event | None) -> None:
        self.spans = 0
        self._stall = stall
        self._lock = threading.Lock()

    def Export(  # noqa: N802 - the gRPC method name
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        if self._stall is not None:
            self._stall.wait()  # accept the call, never answer until released
        n = sum(len(s.spans) for rs in request.resource_spans for s in rs.scope_spans)
        with self._lock:
            self.spans += n
        return trace_service_pb2.ExportTraceServiceResponse()


class OtlpSink:
    """An OTLP/gRPC receiver on 127.0.0.1 at a free port; `stall=True` never answers."""

    def __init__(self, *, stall: bool = False) -> None:
        self._release = threading.Event() if stall else None
        self.service = _Service(self._release)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self.service, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._release is not None:
            self._release.set()
        self._server.stop(grace=None)
