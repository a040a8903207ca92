"""`looptrace replay`: send recorded spans to an OTLP collector, exactly as they were recorded.

Each file line is one `ExportTraceServiceRequest`, sent as it is (ids, parents, timestamps,
resource and attributes untouched) over OTLP/gRPC or OTLP/HTTP with protobuf bodies. Transient
failures (unavailable, throttled, overloaded) are retried with backoff. The first Ctrl-C
finishes the request in flight and stops, so the final count is exact; a second one stops at
once. Needs the `files` extra, and for gRPC the `otlp` extra.
"""

from __future__ import annotations

import http.client
import os
import signal
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from looptrace._otlp_json import ExportTraceServiceRequest
from looptrace._reader import InputError, JsonLinesFile, Warn, reading
from looptrace._span_records import iter_requests, span_count

GRPC = "grpc"
HTTP = "http/protobuf"
PROTOCOLS = (GRPC, HTTP)
_RETRY_HTTP = frozenset({429, 502, 503, 504})
ATTEMPTS = 5
FIRST_DELAY_S = 0.5  # doubled after every failed attempt: 7.5 s of waiting at most


class DeliveryError(Exception):
    """The collector refused a request, or stayed unreachable through every retry."""


class Sender(Protocol):
    """Sends one request; returns how many of its spans the collector rejected."""

    def send(self, request: ExportTraceServiceRequest) -> int:
        """Deliver `request`, retrying transient failures; raise `DeliveryError` otherwise."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


@dataclass
class Retry:
    """How often and how patiently transient failures are retried."""

    attempts: int = field(default_factory=lambda: ATTEMPTS)
    first_delay_s: float = field(default_factory=lambda: FIRST_DELAY_S)
    stop: threading.Event | None = None

    def delays(self) -> Iterator[float]:
        """Yield the wait before each retry."""
        delay = self.first_delay_s
        for _ in range(self.attempts - 1):
            yield delay
            delay *= 2

    def wait(self, seconds: float) -> bool:
        """Wait; return False if a stop was requested meanwhile."""
        if self.stop is None:
            threading.Event().wait(seconds)
            return True
        return not self.stop.wait(seconds)


def http_url(endpoint: str) -> str:
    """Return the URL to POST to: the endpoint, with `/v1/traces` when it has no path."""
    parsed = urllib.parse.urlsplit(endpoint)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InputError(f"--endpoint {endpoint!r} is not an http:// or https:// URL")
    if parsed.path in ("", "/"):
        return parsed._replace(path="/v1/traces").geturl()
    return endpoint


class HttpSender:
    """OTLP/HTTP with protobuf bodies (`Content-Type: application/x-protobuf`)."""

    def __init__(
        self, endpoint: str, headers: Mapping[str, str], timeout_s: float, retry: Retry
    ) -> None:
        self.url = http_url(endpoint)
        self._headers = {"Content-Type": "application/x-protobuf", **headers}
        self._timeout_s = timeout_s
        self._retry = retry

    def send(self, request: ExportTraceServiceRequest) -> int:
        """POST the request; retry on connection errors and 429/502/503/504."""
        body = request.SerializeToString()
        delays = self._retry.delays()
        while True:
            post = urllib.request.Request(self.url, data=body, headers=self._headers)
            try:
                with urllib.request.urlopen(post, timeout=self._timeout_s) as response:
                    reply = ExportTraceServiceResponse()
                    reply.ParseFromString(response.read())
                    return int(reply.partial_success.rejected_spans)
            except urllib.error.HTTPError as error:
                problem = f"HTTP {error.code} {error.reason}"
                if error.code not in _RETRY_HTTP:
                    raise DeliveryError(f"{self.url} answered {problem}") from None
            except (OSError, http.client.HTTPException) as error:  # URLError is an OSError
                problem = f"{type(error).__name__}: {getattr(error, 'reason', error)}"
            delay = next(delays, None)
            if delay is None or not self._retry.wait(delay):
                raise DeliveryError(f"{self.url} unreachable ({problem})")

    def close(self) -> None:
        """Nothing to release: every request has its own connection."""


class GrpcSender:
    """OTLP/gRPC to `TraceService/Export`; `https://` endpoints use TLS, others do not."""

    def __init__(
        self, endpoint: str, headers: Mapping[str, str], timeout_s: float, retry: Retry
    ) -> None:
        import grpc  # noqa: PLC0415 - part of the `otlp` extra
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (  # noqa: PLC0415
            TraceServiceStub,
        )

        parsed = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
        if not parsed.netloc:
            raise InputError(f"--endpoint {endpoint!r} names no host:port")
        self.url = endpoint
        self._grpc = grpc
        self._channel = (
            grpc.secure_channel(parsed.netloc, grpc.ssl_channel_credentials())
            if parsed.scheme == "https"
            else grpc.insecure_channel(parsed.netloc)
        )
        self._export = TraceServiceStub(self._channel).Export  # type: ignore[no-untyped-call]
        self._metadata = tuple((key.lower(), value) for key, value in headers.items())
        self._timeout_s = timeout_s
        self._retry = retry
        code = grpc.StatusCode
        self._transient = {
            code.UNAVAILABLE,
            code.RESOURCE_EXHAUSTED,
            code.DEADLINE_EXCEEDED,
            code.ABORTED,
        }

    def send(self, request: ExportTraceServiceRequest) -> int:
        """Call Export; retry on UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ABORTED."""
        delays = self._retry.delays()
        while True:
            try:
                reply = self._export(request, metadata=self._metadata, timeout=self._timeout_s)
            except self._grpc.RpcError as error:
                status = error.code()
                problem = f"{status.name}: {error.details()}"
                if status not in self._transient:
                    raise DeliveryError(f"{self.url} answered {problem}") from None
            else:
                return int(reply.partial_success.rejected_spans)
            delay = next(delays, None)
            if delay is None or not self._retry.wait(delay):
                raise DeliveryError(f"{self.url} unreachable ({problem})")

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()


@dataclass
class ReplayResult:
    """What a replay delivered."""

    spans: int = 0
    requests: int = 0
    rejected: int = 0
    last: str = ""
    interrupted: bool = False
    error: str | None = None


def replay(
    files: Sequence[JsonLinesFile],
    sender: Sender,
    warn: Warn,
    stop: threading.Event,
) -> ReplayResult:
    """Send every request of `files` in order until done, `stop` is set, or delivery fails."""
    result = ReplayResult()
    with reading(files, "replaying") as bar:
        for file, number, request in iter_requests(files, warn, bar):
            if stop.is_set():
                break
            count = span_count(request)
            if count == 0:
                continue
            try:
                result.rejected += sender.send(request)
            except DeliveryError as error:
                result.error = str(error)
                break
            result.spans += count
            result.requests += 1
            result.last = f"{file.name} line {number}"
            bar.set_postfix_str(f"{result.spans} spans sent")
    result.interrupted = stop.is_set()
    return result


@contextmanager
def graceful_interrupt() -> Iterator[threading.Event]:
    """Turn the first SIGINT into a stop request (the second one interrupts at once)."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_interrupt(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def env_headers(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the headers of `OTEL_EXPORTER_OTLP_HEADERS` and `..._TRACES_HEADERS`."""
    env = os.environ if environ is None else environ
    headers: dict[str, str] = {}
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        for item in env.get(name, "").split(","):
            key, sep, value = item.partition("=")
            if sep and key.strip():
                headers[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(value.strip())
    return headers


def make_sender(
    protocol: str, endpoint: str, headers: Mapping[str, str], timeout_s: float, retry: Retry
) -> Sender:
    """Return the sender of `protocol`."""
    factory: Callable[[str, Mapping[str, str], float, Retry], Sender] = (
        GrpcSender if protocol == GRPC else HttpSender
    )
    return factory(endpoint, headers, timeout_s, retry)
