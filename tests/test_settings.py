"""Exporter settings: arguments over OTEL_* variables, and clear errors for bad ones."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace._export.environment import ENVIRONMENT
from looptrace._export.otlp_settings import OtlpSettings
from looptrace._export.settings import (
    BatchSettings,
    ExportOptions,
    ExportSettings,
    PrometheusSettings,
    resolve,
)

from .otlp_server import LOCALHOST

README = Path(__file__).parent.parent / "README.md"


def own(environ: dict[str, str] | None = None, **options: Any) -> ExportSettings:
    """Resolve for pipelines looptrace owns, with only `environ` as the environment."""
    return resolve(ExportOptions(**options), environ or {}, owns_traces=True, owns_metrics=True)


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
    assert settings.prometheus == (None if expected is None else PrometheusSettings(*expected))


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


BAD = [
    ({"otlp_endpoint": "http//collector:4318"}, {}, "otlp_endpoint: malformed endpoint"),
    ({"otlp_endpoint": "ftp://collector"}, {}, "otlp_endpoint: malformed endpoint .*scheme"),
    ({"otlp_endpoint": "http://collector:port"}, {}, "otlp_endpoint: malformed .*port"),
    ({"otlp_endpoint": "http://:4318"}, {}, "otlp_endpoint: malformed .*no host"),
    ({"otlp_endpoint": "collector", "otlp_protocol": "grpc"}, {}, "needs host:port"),
    (
        {"traces_exporter": "otlp"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"},
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: malformed",
    ),
    (
        {"otlp_endpoint": "http://c:1", "otlp_protocol": "grpc+json"},
        {},
        "otlp_protocol: unknown protocol 'grpc\\+json'",
    ),
    (
        {"traces_exporter": "otlp"},
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
        "OTEL_EXPORTER_OTLP_PROTOCOL: .*no JSON",
    ),
    (
        {"otlp_endpoint": "http://c:1", "otlp_headers": "novalue"},
        {},
        "otlp_headers: cannot parse item 1",
    ),
    (
        {"otlp_endpoint": "http://c:1"},
        {"OTEL_EXPORTER_OTLP_HEADERS": "a=1,=2"},
        "OTEL_EXPORTER_OTLP_HEADERS: cannot parse item 2",
    ),
    ({"otlp_endpoint": "http://c:1", "otlp_headers": 42}, {}, "otlp_headers: expected a dict"),
    (
        {"otlp_endpoint": "http://c:1", "otlp_timeout": 0},
        {},
        "otlp_timeout: expected a number of seconds > 0",
    ),
    (
        {"otlp_endpoint": "http://c:1"},
        {"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "10ms"},
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT: expected",
    ),
    (
        {"otlp_endpoint": "c:1", "otlp_protocol": "grpc"},
        {"OTEL_EXPORTER_OTLP_INSECURE": "yes"},
        "OTEL_EXPORTER_OTLP_INSECURE: expected 'true' or 'false'",
    ),
    (
        {"otlp_endpoint": "c:1", "otlp_protocol": "grpc", "otlp_compression": "deflate"},
        {},
        "otlp_compression: unknown compression 'deflate' for grpc",
    ),
    ({"traces_exporter": "zipkin"}, {}, "traces_exporter: unknown exporter 'zipkin'"),
    ({"metrics_exporter": "otlp,statsd"}, {}, "metrics_exporter: unknown exporter 'statsd'"),
    ({"prometheus": "host:99999"}, {}, "prometheus: expected host:port"),
    ({"prometheus": 1.5}, {}, "prometheus: expected 'host:port', a port or a bool"),
    (
        {"metrics_exporter": "prometheus"},
        {"OTEL_EXPORTER_PROMETHEUS_PORT": "http"},
        "OTEL_EXPORTER_PROMETHEUS_PORT: expected",
    ),
    (
        {"traces_exporter": "otlp"},
        {"OTEL_BSP_MAX_QUEUE_SIZE": "-1"},
        "OTEL_BSP_MAX_QUEUE_SIZE: expected a whole number",
    ),
    (
        {"traces_exporter": "otlp"},
        {"OTEL_BSP_MAX_QUEUE_SIZE": "8", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "9"},
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE: must not exceed",
    ),
]


@pytest.mark.parametrize(("options", "environ", "message"), BAD)
def test_bad_settings_raise_at_configure_naming_the_setting(
    options: dict[str, Any],
    environ: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """configure() raises ConfigError (a ValueError) that names the argument or variable."""
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(looptrace.ConfigError, match=message) as error:
        looptrace.configure(tracer_provider=TracerProvider(), **options)
    assert isinstance(error.value, ValueError)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http//collector"}, "OTEL_EXPORTER_OTLP_ENDPOINT: malf"),
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER: unknown exporter 'jaeger'"),
        (
            {"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "70000"},
            "OTEL_EXPORTER_PROMETHEUS_PORT: expected host:port with a port 0-65535, got '70000'",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:1", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/no"},
            "OTEL_EXPORTER_OTLP_CERTIFICATE: no such file: '/no'",
        ),
    ],
)
def test_bad_variables_of_looptraces_own_pipelines(environ: dict[str, str], message: str) -> None:
    """For the pipelines looptrace owns, a bad variable is a ConfigError naming it."""
    with pytest.raises(looptrace.ConfigError, match=message):
        own(environ)


def test_header_values_stay_out_of_errors_and_reprs() -> None:
    """A malformed header list is reported by position; values never appear."""
    with pytest.raises(looptrace.ConfigError) as error:
        own(otlp_endpoint="http://c:1", otlp_headers="authorization=Bearer s3cret,s3cret-too")
    assert "s3cret" not in str(error.value)
    settings = own(otlp_endpoint="http://c:1", otlp_headers={"authorization": "Bearer s3cret"})
    assert "s3cret" not in repr(settings) + repr(ExportOptions(otlp_headers="a=s3cret"))


def test_port_in_use_is_a_config_error() -> None:
    """A Prometheus port already taken fails configure(), naming the setting and address."""
    with socket.socket() as taken:
        taken.bind((LOCALHOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            looptrace.ConfigError, match=f"prometheus: cannot listen on {LOCALHOST}:{port}"
        ):
            looptrace.configure(tracer_provider=TracerProvider(), prometheus=port)


def test_readme_documents_every_variable() -> None:
    """Each variable of the table is a row of the README's table, with its argument."""
    rows = README.read_text().splitlines()
    missing = []
    for var in ENVIRONMENT:
        name = var.name
        if var.per_signal:
            name = name.replace("OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_[TRACES_\\|METRICS_]")
        argument = f"`{var.argument}`" if var.argument else "—"
        if not any(row.startswith(f"| `{name}` | {argument} |") for row in rows):
            missing.append(var.name)
    assert missing == []


SECRET = "s3cret-token-value"


@pytest.mark.parametrize(
    ("options", "environ", "message"),
    [
        (
            {"otlp_headers": {"authorization": f"Bearer {SECRET}\n"}},
            {},
            "otlp_headers: the value of header 'authorization' holds a control character",
        ),
        (
            {"otlp_headers": f"authorization=Bearer%20{SECRET}%0D%0A"},
            {},
            "otlp_headers: the value of header 'authorization' holds a control character",
        ),
        (
            {},
            {"OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{SECRET}%0D%0A"},
            "OTEL_EXPORTER_OTLP_HEADERS: the value of header 'authorization'",
        ),
        (
            {"otlp_headers": {"authorization": f"Bearer {SECRET}é"}},
            {},
            "otlp_headers: the value of header 'authorization' holds .* non-ASCII",
        ),
        (
            {"otlp_headers": {"x-tok\r\nen": SECRET}},
            {},
            r"otlp_headers: header name 'x-tok\\r\\nen' may only hold",
        ),
        (
            {},
            {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"x-key=%FF{SECRET}"},
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS: the value of header 'x-key'",
        ),
    ],
)
def test_headers_that_cannot_be_sent_are_config_errors_naming_the_header_not_its_value(
    options: dict[str, Any], environ: dict[str, str], message: str
) -> None:
    """A control character, non-ASCII text or a bad name: ConfigError naming the header only."""
    with pytest.raises(looptrace.ConfigError, match=message) as error:
        own({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", **environ}, **options)
    assert SECRET not in str(error.value)
    assert len(str(error.value).splitlines()) == 1


@pytest.mark.parametrize(
    ("options", "environ", "message"),
    [
        ({"otlp_endpoint": "http://c:1", "otlp_timeout": 1e300}, {}, "otlp_timeout: expected"),
        ({}, {"OTEL_EXPORTER_OTLP_TIMEOUT": "1e300"}, "OTEL_EXPORTER_OTLP_TIMEOUT: expected"),
        ({}, {"OTEL_EXPORTER_OTLP_TIMEOUT": "10000"}, "not milliseconds"),
        ({}, {"OTEL_EXPORTER_OTLP_TIMEOUT": "nan"}, "OTEL_EXPORTER_OTLP_TIMEOUT: expected"),
        (
            {},
            {"OTEL_BSP_SCHEDULE_DELAY": "99999999999999"},
            "OTEL_BSP_SCHEDULE_DELAY: expected a whole number from 1 to 3600000",
        ),
        ({}, {"OTEL_BSP_EXPORT_TIMEOUT": "99999999999999"}, "OTEL_BSP_EXPORT_TIMEOUT: expected"),
        ({}, {"OTEL_BSP_MAX_QUEUE_SIZE": "10" * 20}, "OTEL_BSP_MAX_QUEUE_SIZE: expected"),
        ({}, {"OTEL_BSP_MAX_QUEUE_SIZE": "１２"}, "OTEL_BSP_MAX_QUEUE_SIZE: expected"),
        ({"otlp_endpoint": "http://[::1"}, {}, "otlp_endpoint: malformed endpoint 'http://\\[::1'"),
        ({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://[::1"}, "OTEL_EXPORTER_OTLP_ENDPOINT: malf"),
        ({"otlp_endpoint": "http://c\x00:1"}, {}, "otlp_endpoint: malformed endpoint"),
    ],
)
def test_numbers_and_urls_out_of_range_are_config_errors(
    options: dict[str, Any], environ: dict[str, str], message: str
) -> None:
    """Values the exporters would choke on later (overflow, a dead batch thread) fail up front."""
    with pytest.raises(looptrace.ConfigError, match=message):
        own({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", **environ}, **options)


def test_prometheus_port_plus_local_rank_beyond_65535_is_a_config_error() -> None:
    """Port 65535 on local rank 3 would be 65538: a ConfigError naming the variable."""
    with pytest.raises(
        looptrace.ConfigError,
        match="OTEL_EXPORTER_PROMETHEUS_PORT: port 65535 plus the local rank 3 is above 65535",
    ):
        resolve(
            ExportOptions(),
            {"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "65535"},
            owns_traces=True,
            owns_metrics=True,
            local_rank=3,
        )
