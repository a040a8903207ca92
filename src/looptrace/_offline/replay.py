"""`looptrace replay`: send recorded spans to an OTLP collector, exactly as they were recorded.

Each file line is one `ExportTraceServiceRequest`, sent as it is (ids, parents, timestamps,
resource and attributes untouched) over OTLP/gRPC or OTLP/HTTP with protobuf bodies; a line
over the request limit (4 MiB by default: what gRPC servers and the Collector's OTLP receiver
accept) is sent as several requests under it. Transient failures (unavailable, throttled,
overloaded, a timeout) are retried with backoff; each attempt over HTTP, connection to reply,
is bounded by the timeout. A request the collector refuses is reported and the replay goes on;
one it cannot reach stops it. The first Ctrl-C finishes the request in flight and stops, so
the final count is exact; a second one stops at once. Needs the `files` extra, and for gRPC
the `otlp` extra.
"""

from __future__ import annotations

import http.client
import os
import signal
import ssl
import threading
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from looptrace._base.errors import ConfigError
from looptrace._export.otlp_json import ExportTraceServiceRequest
from looptrace._export.otlp_settings import OtlpSettings, otlp_settings, parse_headers
from looptrace._export.settings import ExportOptions
from looptrace._export.settings_table import SETTINGS, signal_variable
from looptrace._offline.bounded_http import BodyTooLargeError, post
from looptrace._offline.reader import JsonLinesFile, Warn, reading
from looptrace._offline.span_records import iter_requests
from looptrace._offline.split import MAX_REQUEST_BYTES, split_request

GRPC = "grpc"
HTTP = "http/protobuf"
PROTOCOLS = (GRPC, HTTP)
_RETRY_HTTP = frozenset({429, 502, 503, 504})
_STOP_HTTP = frozenset({401, 403, 404, 405})  # no request to this endpoint can succeed
ATTEMPTS = 5
FIRST_DELAY_S = 0.5  # doubled after every failed attempt: 7.5 s of waiting at most


class DeliveryError(Exception):
    """The collector refused a request, or stayed unreachable through every retry."""

    def __init__(self, message: str, *, stops: bool = False) -> None:
        super().__init__(message)
        # True: no later request can get through either (unreachable, not an OTLP receiver,
        # not authorised); False: this request was refused (too large, malformed).
        self.stops = stops


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


def replay_settings(
    endpoint: str | None,
    protocol: str | None,
    headers: Sequence[str],
    timeout_s: float | None,
    environ: Mapping[str, str] | None = None,
) -> OtlpSettings:
    """Resolve replay's options with the parser of `configure()`: same rules, same errors.

    `--endpoint` works like `otlp_endpoint` (`/v1/traces` is added), except that an HTTP URL
    with a path is used as given, like `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`. Each `--header`
    is one `key=value` item of `OTEL_EXPORTER_OTLP_HEADERS` and wins over it.

    Raises:
        ConfigError: naming the option (`--endpoint`, `--header`, `--timeout`, `--protocol`)
            or the variable; never showing a header value.

    """
    env = dict(os.environ if environ is None else environ)
    names = {s.argument: s.option for s in SETTINGS if s.argument and s.option}
    if endpoint is not None and _has_path(endpoint):
        env[_TRACES_ENDPOINT] = endpoint
        names[_TRACES_ENDPOINT] = "--endpoint"
        endpoint = None
    try:
        extra: dict[str, str] = {}
        for item in headers:
            extra.update(parse_headers(item, "--header") if item.strip() else {})
        options = ExportOptions(
            otlp_endpoint=endpoint,
            otlp_protocol=protocol,
            otlp_headers=extra or None,
            otlp_timeout=timeout_s,
        )
        return otlp_settings("traces", options, env)
    except ConfigError as error:
        source, sep, rest = str(error).partition(":")
        raise ConfigError(f"{names.get(source, source)}{sep}{rest}") from None


_TRACES_ENDPOINT = signal_variable("OTEL_EXPORTER_OTLP_ENDPOINT", "traces")


def _has_path(endpoint: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(endpoint)
    except ValueError:
        return False  # malformed: the settings parser says how
    return "://" in endpoint and parts.path not in ("", "/")


def one_line(text: object, limit: int = 160) -> str:
    """Return server-supplied text as one printable line of at most `limit` characters."""
    flat = "".join(c if c.isprintable() else " " for c in str(text)).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class HttpSender:
    """OTLP/HTTP with protobuf bodies (`Content-Type: application/x-protobuf`)."""

    def __init__(self, settings: OtlpSettings, retry: Retry) -> None:
        self.url = settings.endpoint
        self._headers = {"Content-Type": "application/x-protobuf", **settings.headers}
        self._timeout_s = settings.timeout_s
        self._retry = retry
        self._context: ssl.SSLContext | None = None
        if self.url.startswith("https://"):
            self._context = ssl.create_default_context(cafile=settings.certificate)
            if settings.client_certificate:
                self._context.load_cert_chain(settings.client_certificate, settings.client_key)

    def send(self, request: ExportTraceServiceRequest) -> int:
        """POST the request; retry on connection errors, timeouts and 429/502/503/504.

        Each attempt, connection to reply body, is bounded by the timeout; a reply body is
        read up to `MAX_BODY` bytes.
        """
        body = request.SerializeToString()
        delays = self._retry.delays()
        while True:
            try:
                reply = post(
                    self.url, body, self._headers, timeout_s=self._timeout_s, context=self._context
                )
            except BodyTooLargeError as error:
                raise DeliveryError(
                    f"{self.url} answered with {error} (is the endpoint an OTLP receiver?)",
                    stops=True,
                ) from None
            except (OSError, http.client.HTTPException) as error:  # URLError is an OSError
                problem = one_line(f"{type(error).__name__}: {getattr(error, 'reason', error)}")
            else:
                if 200 <= reply.status < 300:
                    return _rejected(self.url, reply.status, reply.body)
                problem = f"HTTP {reply.status} {one_line(reply.reason)}"
                if reply.status not in _RETRY_HTTP:
                    stops = reply.status in _STOP_HTTP
                    raise DeliveryError(f"{self.url} answered {problem}", stops=stops)
            delay = next(delays, None)
            if delay is None or not self._retry.wait(delay):
                raise DeliveryError(f"{self.url} unreachable ({problem})", stops=True)

    def close(self) -> None:
        """Nothing to release: every request has its own connection."""


def _rejected(url: str, status: int, body: bytes) -> int:
    """Return the spans a success reply says were rejected; a garbled reply is an error."""
    reply = ExportTraceServiceResponse()
    try:
        reply.ParseFromString(body)
    except DecodeError:
        raise DeliveryError(
            f"{url} answered HTTP {status} with a body that is not an OTLP response "
            "(is the endpoint an OTLP receiver?)",
            stops=True,
        ) from None
    return max(0, int(reply.partial_success.rejected_spans))


class GrpcSender:
    """OTLP/gRPC to `TraceService/Export`, plaintext or TLS as `configure()` would connect."""

    def __init__(self, settings: OtlpSettings, retry: Retry) -> None:
        import grpc  # noqa: PLC0415 - part of the `otlp` extra
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (  # noqa: PLC0415
            TraceServiceStub,
        )

        self.url = settings.endpoint
        self._grpc = grpc
        if settings.insecure:
            self._channel = grpc.insecure_channel(settings.endpoint)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(settings.certificate),
                private_key=_read(settings.client_key),
                certificate_chain=_read(settings.client_certificate),
            )
            self._channel = grpc.secure_channel(settings.endpoint, credentials)
        self._export = TraceServiceStub(self._channel).Export  # type: ignore[no-untyped-call]
        self._metadata = tuple(settings.headers.items())
        self._timeout_s = settings.timeout_s
        self._retry = retry
        code = grpc.StatusCode
        self._transient = {
            code.UNAVAILABLE,
            code.RESOURCE_EXHAUSTED,
            code.DEADLINE_EXCEEDED,
            code.ABORTED,
        }
        self._stopping = {code.UNAUTHENTICATED, code.PERMISSION_DENIED, code.UNIMPLEMENTED}

    def send(self, request: ExportTraceServiceRequest) -> int:
        """Call Export; retry on UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ABORTED."""
        delays = self._retry.delays()
        while True:
            try:
                reply = self._export(request, metadata=self._metadata, timeout=self._timeout_s)
            except self._grpc.RpcError as error:
                status = error.code()
                problem = one_line(f"{status.name}: {error.details()}")
                too_large = "larger than max" in str(error.details())  # no retry helps
                if status not in self._transient or too_large:
                    stops = status in self._stopping
                    raise DeliveryError(f"{self.url} answered {problem}", stops=stops) from None
            else:
                return max(0, int(reply.partial_success.rejected_spans))
            delay = next(delays, None)
            if delay is None or not self._retry.wait(delay):
                raise DeliveryError(f"{self.url} unreachable ({problem})", stops=True)

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as file:
        return file.read()


@dataclass
class ReplayResult:
    """What a replay delivered, and what the collector refused."""

    spans: int = 0
    requests: int = 0
    rejected: int = 0
    last: str = ""
    interrupted: bool = False
    error: str | None = None  # why the replay stopped (the collector unreachable …)
    refused_spans: int = 0  # in requests the collector refused, or too large to send
    refusals: list[str] = field(default_factory=list)  # what was refused, one line each


def replay(
    files: Sequence[JsonLinesFile],
    sender: Sender,
    warn: Warn,
    stop: threading.Event,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> ReplayResult:
    """Send every request of `files` in order until done, `stop` is set, or delivery fails.

    A line over `max_request_bytes` is sent as several requests under it. A request the
    collector refuses (or a span too large to send) is reported and the replay goes on; a
    collector that is unreachable, not an OTLP receiver or refuses the credentials stops it.
    """
    result = ReplayResult()
    with reading(files, "replaying") as bar:
        for file, number, request in iter_requests(files, warn, bar):
            if stop.is_set() or result.error is not None:
                break
            where = f"{file.name} line {number}"
            for part in split_request(request, max_request_bytes):
                if stop.is_set():
                    break
                if part.request is None:
                    _refuse(
                        result,
                        part.spans,
                        f"{where}: a span of {part.size} bytes is over the request limit of "
                        f"{max_request_bytes} bytes (--max-request-bytes); not sent",
                        warn,
                    )
                    continue
                if part.spans == 0:
                    continue
                try:
                    result.rejected += sender.send(part.request)
                except DeliveryError as error:
                    if error.stops:
                        result.error = str(error)
                        break
                    _refuse(result, part.spans, f"{where}: {error}", warn)
                    continue
                result.spans += part.spans
                result.requests += 1
                result.last = where
                bar.set_postfix_str(f"{result.spans} spans sent")
    result.interrupted = stop.is_set()
    return result


def _refuse(result: ReplayResult, spans: int, message: str, warn: Warn) -> None:
    result.refused_spans += spans
    result.refusals.append(message)
    warn(message)


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


def make_sender(settings: OtlpSettings, retry: Retry) -> Sender:
    """Return the sender of the settings' protocol."""
    if settings.protocol == "grpc":
        return GrpcSender(settings, retry)
    return HttpSender(settings, retry)
