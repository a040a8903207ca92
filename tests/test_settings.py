"""Exporter settings: arguments over OTEL_* variables, for looptrace's pipelines or not."""

from __future__ import annotations

from typing import Any

import pytest

from looptrace._export.otlp_settings import OtlpSettings
from looptrace._export.settings import (
    BatchSettings,
    ExportOptions,
    ExportSettings,
    PrometheusSettings,
    resolve,
)

from .helpers.ports import LOCALHOST
from .helpers.settings import own


def otlp(signal: str, endpoint: str, **changes: Any) -> OtlpSettings:
    """Return default OTLP/HTTP settings for a signal, with `changes`."""
    values: dict[str, Any] = {
        "signal": signal,
        "protocol": "http/protobuf",
        "endpoint": endpoint,
        "insecure": False,
        "headers": {},
        "certificate": None,
        "client_certificate": None,
        "client_key": None,
        "timeout_s": 10.0,
        "compression": None,
    }
    return OtlpSettings(**{**values, **changes})


def test_nothing_is_exported_without_an_endpoint_or_exporter() -> None:
    """No endpoint and no OTEL_*_EXPORTER: no exporter at all (not the localhost default)."""
    assert own() == ExportSettings()
    assert not own().any


def test_general_endpoint_gets_signal_paths_over_http() -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT is a base URL: /v1/traces and /v1/metrics are appended."""
    settings = own({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert settings == ExportSettings(
        traces=otlp("traces", "http://collector:4318/v1/traces"),
        metrics=otlp("metrics", "http://collector:4318/v1/metrics"),
    )


def test_per_signal_variables_win_and_are_used_as_given() -> None:
    """A per-signal variable beats the general one; its URL is used unchanged."""
    settings = own(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://tempo:4318/custom/traces",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "3",
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "7.5",
            "OTEL_EXPORTER_OTLP_HEADERS": "a=1,b=2",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=3",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        }
    )
    assert settings == ExportSettings(
        traces=otlp(
            "traces",
            "https://tempo:4318/custom/traces",
            timeout_s=3.0,
            headers={"b": "3"},
            compression="gzip",
        ),
        metrics=otlp(
            "metrics",
            "http://collector:4318/v1/metrics",
            timeout_s=7.5,
            headers={"a": "1", "b": "2"},
            compression="gzip",
        ),
    )


def test_only_a_traces_endpoint_exports_only_traces() -> None:
    """Setting only the traces endpoint (the MLflow recipe) pushes no metrics."""
    settings = own({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://mlflow:5000/v1/traces"})
    assert (settings.traces is not None, settings.metrics) == (True, None)


def test_arguments_win_over_variables() -> None:
    """Explicit arguments beat every variable; headers merge over the variable's, key by key."""
    settings = own(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-team=env,x-keep=1",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "3",
            "OTEL_TRACES_EXPORTER": "none",
        },
        otlp_endpoint="collector:4317",
        otlp_protocol="grpc",
        otlp_headers={"X-Team": "arg"},
        otlp_timeout=2,
        otlp_insecure=True,
        traces_exporter="otlp,console",
        metrics_exporter="none",
    )
    assert settings == ExportSettings(
        traces=otlp(
            "traces",
            "collector:4317",
            protocol="grpc",
            insecure=True,
            headers={"x-team": "arg", "x-keep": "1"},
            timeout_s=2.0,
        ),
        console_traces=True,
    )


@pytest.mark.parametrize(
    ("endpoint", "environ", "expected"),
    [
        ("http://collector:4317", {}, ("collector:4317", True)),
        ("https://collector:4317", {}, ("collector:4317", False)),
        ("collector:4317", {}, ("collector:4317", False)),
        ("collector:4317", {"OTEL_EXPORTER_OTLP_INSECURE": "true"}, ("collector:4317", True)),
        (
            "https://collector",
            {"OTEL_EXPORTER_OTLP_TRACES_INSECURE": "FALSE"},
            ("collector", False),
        ),
    ],
)
def test_grpc_target_and_plaintext_follow_the_scheme(
    endpoint: str, environ: dict[str, str], expected: tuple[str, bool]
) -> None:
    """gRPC: http:// is plaintext, https:// or no scheme is TLS, unless *_INSECURE says so."""
    settings = own(environ, otlp_endpoint=endpoint, otlp_protocol="grpc")
    assert settings.traces is not None
    assert (settings.traces.endpoint, settings.traces.insecure) == expected


def test_application_pipelines_take_no_exporters_from_variables() -> None:
    """Variables enable nothing for the application's providers; arguments still do."""
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318", "OTEL_METRICS_EXPORTER": "otlp"}
    assert resolve(ExportOptions(), environ, owns_traces=False, owns_metrics=False) == (
        ExportSettings()
    )
    explicit = resolve(
        ExportOptions(otlp_endpoint="http://arg:4318"),
        environ,
        owns_traces=False,
        owns_metrics=False,
    )
    assert (explicit.traces, explicit.metrics) == (
        otlp("traces", "http://arg:4318/v1/traces"),
        otlp("metrics", "http://arg:4318/v1/metrics"),
    )


@pytest.mark.parametrize(
    ("prometheus", "environ", "local_rank", "expected"),
    [
        (True, {}, 0, (LOCALHOST, 9464, "OTEL_EXPORTER_PROMETHEUS_PORT")),
        (9000, {}, 2, (LOCALHOST, 9002, "prometheus")),
        ("9000", {}, 0, (LOCALHOST, 9000, "prometheus")),
        ("0.0.0.0:9000", {}, 1, ("0.0.0.0", 9001, "prometheus")),
        ("[::1]:9000", {}, 0, ("::1", 9000, "prometheus")),
        (0, {}, 3, (LOCALHOST, 0, "prometheus")),
        (
            None,
            {
                "OTEL_METRICS_EXPORTER": "prometheus",
                "OTEL_EXPORTER_PROMETHEUS_HOST": "10.0.0.5",
                "OTEL_EXPORTER_PROMETHEUS_PORT": "9100",
            },
            1,
            ("10.0.0.5", 9101, "OTEL_EXPORTER_PROMETHEUS_PORT"),
        ),
        (False, {"OTEL_METRICS_EXPORTER": "prometheus"}, 0, None),
    ],
)
def test_prometheus_address(
    prometheus: object,
    environ: dict[str, str],
    local_rank: int,
    expected: tuple[str, int, str] | None,
) -> None:
    """The endpoint binds 127.0.0.1 unless told otherwise; the local rank is added to the port."""
    settings = resolve(
        ExportOptions(prometheus=prometheus),  # type: ignore[arg-type]
        environ,
        owns_traces=True,
        owns_metrics=True,
        local_rank=local_rank,
    )
    assert settings.prometheus == (
        None if expected is None else PrometheusSettings(*expected, local_rank=local_rank)
    )


def test_batch_processor_variables() -> None:
    """OTEL_BSP_* reach the batch span processor."""
    settings = own(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_BSP_EXPORT_TIMEOUT": "2000",
            "OTEL_BSP_MAX_QUEUE_SIZE": "64",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "32",
        }
    )
    assert settings.batch == BatchSettings(100, 2000, 64, 32)
    assert settings.traces == otlp("traces", "http://localhost:4318/v1/traces")
