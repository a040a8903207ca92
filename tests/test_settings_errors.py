"""Exporter settings: bad ones are clear errors naming the setting, never showing a secret."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace._export.settings import (
    ExportOptions,
    resolve,
)

from .helpers.ports import LOCALHOST
from .helpers.settings import own

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


def test_a_port_in_use_names_the_likely_cause_and_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two processes of one local rank: the error says so and names what changes the port."""
    with socket.socket() as taken:
        taken.bind((LOCALHOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port - 2))
        monkeypatch.setenv("LOCAL_RANK", "2")
        monkeypatch.setenv("RANK", "2")
        monkeypatch.setenv("WORLD_SIZE", "4")
        with pytest.raises(looptrace.ConfigError) as error:
            looptrace.configure(tracer_provider=TracerProvider(), prometheus=True)
    assert str(error.value) == (
        f"OTEL_EXPORTER_PROMETHEUS_PORT: cannot listen on {LOCALHOST}:{port}: Address already "
        "in use; another process listens there, most likely another looptrace process with "
        "the same local rank (this one is local rank 2, and each process listens on the port "
        "plus its local rank): give each process of a node its own LOCAL_RANK, or choose the "
        "port with configure(prometheus=PORT) or OTEL_EXPORTER_PROMETHEUS_PORT "
        "(prometheus=0: any free port)"
    )


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
