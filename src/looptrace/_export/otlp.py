"""OTLP exporters (gRPC or HTTP) built from resolved settings, and the metrics push thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
    OTLPMetricExporter as HttpMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace.export import SpanExporter

from looptrace._export import sdk_logs
from looptrace._export.coalesced import Coalesced
from looptrace._export.otlp_settings import OtlpSettings
from looptrace._stats.health import Incidents


def span_exporter(settings: OtlpSettings) -> SpanExporter:
    """Return the OTLP span exporter for these settings, every option passed explicitly."""
    if settings.protocol == "grpc":
        return GrpcSpanExporter(**_grpc_options(settings))
    return HttpSpanExporter(**_http_options(settings))


def metric_exporter(settings: OtlpSettings) -> MetricExporter:
    """Return the OTLP metric exporter for these settings, every option passed explicitly."""
    if settings.protocol == "grpc":
        return GrpcMetricExporter(**_grpc_options(settings))
    return HttpMetricExporter(**_http_options(settings))


# gRPC waits longer and longer between reconnections to a collector that is down (up to 120 s
# by default): after a long outage, every span made in the first minutes after the collector
# is back would be lost. Capped, a collector that restarts is reached again within 2 s.
RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


def _grpc_options(settings: OtlpSettings) -> dict[str, Any]:
    credentials = None
    if not settings.insecure:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(settings.certificate),
            private_key=_read(settings.client_key),
            certificate_chain=_read(settings.client_certificate),
        )
    compression = grpc.Compression.Gzip if settings.compression else grpc.Compression.NoCompression
    return {
        "endpoint": settings.endpoint,
        "insecure": settings.insecure,
        "credentials": credentials,
        "headers": dict(settings.headers),
        "timeout": settings.timeout_s,
        "compression": compression,
        "channel_options": RECONNECT_OPTIONS,
    }


def _http_options(settings: OtlpSettings) -> dict[str, Any]:
    compression = {
        None: Compression.NoCompression,
        "gzip": Compression.Gzip,
        "deflate": Compression.Deflate,
    }[settings.compression]
    return {
        "endpoint": settings.endpoint,
        "certificate_file": settings.certificate,
        "client_key_file": settings.client_key,
        "client_certificate_file": settings.client_certificate,
        "headers": dict(settings.headers),
        "timeout": settings.timeout_s,
        "compression": compression,
    }


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as file:
        return file.read()


class MetricPusher:
    """Pushes the latest cumulative metrics over OTLP from a daemon thread of its own.

    Requests coalesce: the thread always sends the totals as they are when it gets to them,
    so a stalled collector delays pushes but never queues them up. Each push is counted in
    `Incidents` at most once: failed when its export fails, or when it is given up on first.
    """

    def __init__(
        self,
        exporter: MetricExporter,
        build: Callable[[], MetricsData | None],
        incidents: Incidents,
        timeout_s: float,
    ) -> None:
        self._exporter = exporter
        self._build = build
        self._incidents = incidents
        self._timeout_ms = timeout_s * 1e3
        self._pushes = Coalesced(self._push, "looptrace-metrics")
        self._lock = threading.Lock()
        self._settled = 0  # every ticket up to this one has its outcome counted

    def request(self) -> int:
        """Ask for a push of the current totals; return a ticket for `wait()`."""
        return self._pushes.request()

    def wait(self, ticket: int, timeout_s: float) -> bool:
        """Wait until the push for `ticket` is done (delivered or failed), at most `timeout_s`."""
        return self._pushes.wait(ticket, timeout_s)

    def give_up(self, ticket: int) -> None:
        """Count the push for `ticket` as failed now unless its outcome is already counted.

        At shutdown's bound the process may exit under a push still in flight; its totals
        were not delivered, and that push's own outcome, if it comes, is not counted again.
        """
        if self._settle(ticket):
            self._incidents.push_failed()

    def close(self) -> None:
        """Stop the thread after the pending push and shut the exporter down."""
        self._pushes.close()
        try:
            with sdk_logs.ours():
                self._exporter.shutdown()
        except Exception:
            self._incidents.failed("OTLP metric exporter shutdown")

    def after_fork_in_child(self) -> None:
        """Push nothing from a forked child: its series would overwrite the parent's totals."""
        self._lock = threading.Lock()
        self._settled = 0
        self._pushes.after_fork_in_child(closed=True)

    def _push(self, ticket: int) -> None:
        try:
            data = self._build()
            with sdk_logs.ours():
                result = (
                    MetricExportResult.SUCCESS  # nothing recorded yet: nothing to deliver
                    if data is None
                    else self._exporter.export(data, timeout_millis=self._timeout_ms)
                )
        except OSError:  # a transport error the exporter let through (older SDKs' HTTP one)
            result = MetricExportResult.FAILURE
        except Exception:
            if not self._pushes.closed:  # raised when close() shut the exporter down under it
                self._incidents.failed("OTLP metric export")
            result = MetricExportResult.FAILURE
        # Not counted again when given up on at shutdown, which counted it then.
        if self._settle(ticket) and result is not MetricExportResult.SUCCESS:
            self._incidents.push_failed()

    def _settle(self, ticket: int) -> bool:
        """Mark the pushes up to `ticket` counted; False when they already were."""
        with self._lock:
            if self._settled >= ticket:
                return False
            self._settled = ticket
            return True
