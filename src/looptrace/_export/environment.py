"""The environment variables looptrace reads, in one table (documented in the README).

Every setting of the exporters comes from an argument of `configure()` or, failing that, from
the standard OpenTelemetry variable. The OTLP ones also exist per signal, with `TRACES_` or
`METRICS_` after `OTEL_EXPORTER_OTLP_`; the per-signal variable wins over the general one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One environment variable: its name, the argument that overrides it, what it sets."""

    name: str
    argument: str | None
    meaning: str
    default: str
    per_signal: bool = False


ENVIRONMENT: tuple[EnvVar, ...] = (
    EnvVar(
        "OTEL_SDK_DISABLED",
        None,
        "`true`: no spans and no exporters at all; statistics still work",
        "`false`",
    ),
    EnvVar("OTEL_SERVICE_NAME", "service_name", "`service.name` of the Resource", "`looptrace`"),
    EnvVar(
        "OTEL_TRACES_EXPORTER",
        "traces_exporter",
        "`otlp`, `console` or `none` (comma-separated)",
        "`otlp` when an OTLP endpoint is set, else `none`",
    ),
    EnvVar(
        "OTEL_METRICS_EXPORTER",
        "metrics_exporter",
        "`otlp`, `prometheus` or `none` (comma-separated)",
        "`otlp` when an OTLP endpoint is set, else `none`",
    ),
    EnvVar(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "otlp_endpoint",
        "collector URL; over HTTP `/v1/traces` and `/v1/metrics` are appended, while a "
        "per-signal variable is used as given",
        "`http://localhost:4318` (HTTP), `http://localhost:4317` (gRPC)",
        per_signal=True,
    ),
    EnvVar(
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "otlp_protocol",
        "`http/protobuf` or `grpc`",
        "`http/protobuf`",
        per_signal=True,
    ),
    EnvVar(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "otlp_headers",
        "`key=value,key2=value2` (values URL-encoded) sent with every export; the argument "
        "(a dict or such a string) is merged over it",
        "none",
        per_signal=True,
    ),
    EnvVar(
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "otlp_certificate",
        "PEM file of the CA that signed the collector's certificate",
        "the system's CAs",
        per_signal=True,
    ),
    EnvVar(
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        "otlp_client_certificate",
        "PEM client certificate for mutual TLS",
        "none",
        per_signal=True,
    ),
    EnvVar(
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        "otlp_client_key",
        "PEM private key of the client certificate",
        "none",
        per_signal=True,
    ),
    EnvVar(
        "OTEL_EXPORTER_OTLP_INSECURE",
        "otlp_insecure",
        "gRPC only: `true` for plaintext, `false` for TLS",
        "from the scheme: `http://` plaintext, `https://` or none TLS",
        per_signal=True,
    ),
    EnvVar(
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "otlp_timeout",
        "time one export may take, retries included, in seconds as the Python exporters read "
        "it (the specification says milliseconds), at most 3600; also bounds `shutdown()`",
        "`10`",
        per_signal=True,
    ),
    EnvVar(
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "otlp_compression",
        "`gzip`, `none`, or `deflate` (HTTP only)",
        "`none`",
        per_signal=True,
    ),
    EnvVar(
        "OTEL_EXPORTER_PROMETHEUS_HOST",
        "prometheus",
        "address the Prometheus endpoint binds",
        "`127.0.0.1`",
    ),
    EnvVar(
        "OTEL_EXPORTER_PROMETHEUS_PORT",
        "prometheus",
        "port of the Prometheus endpoint; each process adds its local rank",
        "`9464`",
    ),
    EnvVar(
        "OTEL_BSP_SCHEDULE_DELAY",
        None,
        "milliseconds between two span exports (1 to 3600000)",
        "`5000`",
    ),
    EnvVar(
        "OTEL_BSP_EXPORT_TIMEOUT",
        None,
        "passed to the `BatchSpanProcessor` (1 to 3600000); each export is bounded by the OTLP "
        "timeout",
        "`30000`",
    ),
    EnvVar(
        "OTEL_BSP_MAX_QUEUE_SIZE",
        None,
        "spans waiting for export (about 3 KB each; 1 to 1000000); more are dropped and counted",
        "`32768`",
    ),
    EnvVar(
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        None,
        "spans per export request (at most the queue size)",
        "`512`",
    ),
)


def signal_variable(name: str, signal: str) -> str:
    """Return the per-signal form of an OTLP variable (`..._OTLP_TRACES_ENDPOINT`)."""
    return name.replace("OTEL_EXPORTER_OTLP_", f"OTEL_EXPORTER_OTLP_{signal.upper()}_", 1)
