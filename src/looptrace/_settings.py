"""Exporter settings: `configure()` arguments over `OTEL_*` variables, checked up front.

Everything is parsed and validated here, before `configure()` installs anything, so a bad
setting is a `ConfigError` naming the argument or variable, never a failure in a background
thread later. Header values never appear in messages or reprs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import SplitResult, unquote, urlsplit

from looptrace._environment import signal_variable
from looptrace._errors import ConfigError

Signal = Literal["traces", "metrics"]
Protocol = Literal["grpc", "http/protobuf"]

_TRACE_EXPORTERS = frozenset({"otlp", "console", "none"})
_METRIC_EXPORTERS = frozenset({"otlp", "prometheus", "none"})
_DEFAULT_ENDPOINT = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
_DEFAULT_TIMEOUT_S = 10.0
_DEFAULT_PROMETHEUS_HOST = "127.0.0.1"
_DEFAULT_PROMETHEUS_PORT = 9464


@dataclass(frozen=True)
class ExportOptions:
    """The exporter arguments of `configure()`; `None` leaves a setting to the environment."""

    otlp_endpoint: str | None = None
    otlp_protocol: str | None = None
    otlp_headers: Mapping[str, str] | str | None = field(default=None, repr=False)
    otlp_certificate: str | None = None
    otlp_client_certificate: str | None = None
    otlp_client_key: str | None = None
    otlp_insecure: bool | None = None
    otlp_timeout: float | None = None
    otlp_compression: str | None = None
    traces_exporter: str | None = None
    metrics_exporter: str | None = None
    prometheus: str | int | bool | None = None


@dataclass(frozen=True)
class OtlpSettings:
    """How one signal reaches an OTLP receiver.

    `endpoint` is the gRPC target (`host:port`) or the full HTTP URL of the signal.
    """

    signal: Signal
    protocol: Protocol
    endpoint: str
    insecure: bool
    headers: Mapping[str, str] = field(repr=False)
    certificate: str | None
    client_certificate: str | None
    client_key: str | None
    timeout_s: float
    compression: str | None


@dataclass(frozen=True)
class PrometheusSettings:
    """Where the Prometheus pull endpoint listens; `source` names the setting for errors."""

    host: str
    port: int
    source: str


@dataclass(frozen=True)
class BatchSettings:
    """The `BatchSpanProcessor` parameters (`OTEL_BSP_*`)."""

    schedule_delay_ms: int = 5000
    export_timeout_ms: int = 30000
    max_queue_size: int = 2048
    max_export_batch_size: int = 512


@dataclass(frozen=True)
class ExportSettings:
    """Every exporter looptrace builds, resolved and validated."""

    traces: OtlpSettings | None = None
    console_traces: bool = False
    metrics: OtlpSettings | None = None
    prometheus: PrometheusSettings | None = None
    batch: BatchSettings = field(default_factory=BatchSettings)

    @property
    def any(self) -> bool:
        """Whether there is anything to export."""
        return bool(self.traces or self.console_traces or self.metrics or self.prometheus)

    @property
    def timeout_s(self) -> float:
        """The longest OTLP timeout: the bound on a flush and on `shutdown()`."""
        timeouts = [s.timeout_s for s in (self.traces, self.metrics) if s is not None]
        return max(timeouts, default=_DEFAULT_TIMEOUT_S)


def resolve(
    options: ExportOptions,
    environ: Mapping[str, str] | None = None,
    *,
    owns_traces: bool,
    owns_metrics: bool,
    local_rank: int = 0,
) -> ExportSettings:
    """Resolve the exporters from the arguments and the environment.

    The `OTEL_*_EXPORTER` choices and endpoints in the environment turn exporters on only for
    the pipelines looptrace creates (`owns_*`): an application that set up its own providers
    has applied them already. Arguments always take effect; details an argument leaves out
    (headers, certificates, timeouts) still come from the environment.
    """
    env = os.environ if environ is None else environ
    traces = _choice("traces", options.traces_exporter, options, env, owns=owns_traces)
    metrics = _choice("metrics", options.metrics_exporter, options, env, owns=owns_metrics)
    prometheus = _prometheus(options.prometheus, "prometheus" in metrics, env, local_rank)
    return ExportSettings(
        traces=_otlp("traces", options, env) if "otlp" in traces else None,
        console_traces="console" in traces,
        metrics=_otlp("metrics", options, env) if "otlp" in metrics else None,
        prometheus=prometheus,
        batch=_batch(env) if traces - {"none"} else BatchSettings(),
    )


def parse_headers(text: str, source: str) -> dict[str, str]:
    """Parse `key=value,key2=value2` (values URL-encoded) into lower-case keys and values."""
    headers: dict[str, str] = {}
    for number, item in enumerate(text.split(","), 1):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or not key or not all(c.isalnum() or c in "-_." for c in key):
            raise ConfigError(
                f"{source}: cannot parse item {number} of the header list; expected "
                "key=value pairs separated by commas (values are not shown)"
            )
        headers[key] = unquote(value.strip())
    return headers


# -- exporter choice ----------------------------------------------------------------------


def _choice(
    signal: Signal,
    explicit: str | None,
    options: ExportOptions,
    env: Mapping[str, str],
    *,
    owns: bool,
) -> set[str]:
    allowed = _TRACE_EXPORTERS if signal == "traces" else _METRIC_EXPORTERS
    if explicit is not None:
        return _names(explicit, f"{signal}_exporter", allowed)
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    if owns and env.get(variable, "").strip():
        return _names(env[variable], variable, allowed)
    endpoint_set = options.otlp_endpoint is not None or (
        owns
        and bool(
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or env.get(signal_variable("OTEL_EXPORTER_OTLP_ENDPOINT", signal))
        )
    )
    return {"otlp"} if endpoint_set else set()


def _names(text: str, source: str, allowed: frozenset[str]) -> set[str]:
    names = {name.strip().lower() for name in text.split(",") if name.strip()}
    unknown = sorted(names - allowed)
    if unknown:
        raise ConfigError(
            f"{source}: unknown exporter {unknown[0]!r}; looptrace supports "
            f"{', '.join(sorted(allowed))}"
        )
    return names - {"none"}


# -- OTLP ---------------------------------------------------------------------------------


def _lookup(
    name: str, explicit: object, argument: str, signal: Signal, env: Mapping[str, str]
) -> tuple[str | None, str]:
    """Return (value, source): the argument, else the per-signal variable, else the general."""
    if explicit is not None:
        return None, argument
    for variable in (signal_variable(name, signal), name):
        value = env.get(variable, "").strip()
        if value:
            return value, variable
    return None, name


def _otlp(signal: Signal, options: ExportOptions, env: Mapping[str, str]) -> OtlpSettings:
    protocol = _protocol(signal, options, env)
    endpoint, insecure_default = _endpoint(signal, protocol, options, env)
    return OtlpSettings(
        signal=signal,
        protocol=protocol,
        endpoint=endpoint,
        insecure=_insecure(signal, options, env, insecure_default) if protocol == "grpc" else False,
        headers=_headers(signal, options, env),
        certificate=_file("CERTIFICATE", options.otlp_certificate, signal, env),
        client_certificate=_file(
            "CLIENT_CERTIFICATE", options.otlp_client_certificate, signal, env
        ),
        client_key=_file("CLIENT_KEY", options.otlp_client_key, signal, env),
        timeout_s=_timeout(signal, options, env),
        compression=_compression(signal, protocol, options, env),
    )


def _protocol(signal: Signal, options: ExportOptions, env: Mapping[str, str]) -> Protocol:
    value, source = _lookup(
        "OTEL_EXPORTER_OTLP_PROTOCOL", options.otlp_protocol, "otlp_protocol", signal, env
    )
    raw = options.otlp_protocol if options.otlp_protocol is not None else value
    text = (raw or "http/protobuf").strip().lower()
    if text == "grpc":
        return "grpc"
    if text == "http/protobuf":
        return "http/protobuf"
    hint = " (the Python OTLP exporters have no JSON encoding)" if text == "http/json" else ""
    raise ConfigError(f"{source}: unknown protocol {raw!r}; use 'grpc' or 'http/protobuf'{hint}")


def _endpoint(
    signal: Signal, protocol: Protocol, options: ExportOptions, env: Mapping[str, str]
) -> tuple[str, bool]:
    """Return the exporter's endpoint and whether the URL asks for plaintext (gRPC)."""
    if options.otlp_endpoint is not None:
        raw, source, base = options.otlp_endpoint, "otlp_endpoint", True
    else:
        per_signal = signal_variable("OTEL_EXPORTER_OTLP_ENDPOINT", signal)
        if env.get(per_signal, "").strip():
            raw, source, base = env[per_signal], per_signal, False
        elif env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
            raw, source, base = (
                env["OTEL_EXPORTER_OTLP_ENDPOINT"],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                True,
            )
        else:
            raw, source, base = _DEFAULT_ENDPOINT[protocol], "the default endpoint", True
    if not isinstance(raw, str):
        raise ConfigError(f"{source}: expected a URL string, got {type(raw).__name__}")
    text = raw.strip()
    has_scheme = "://" in text
    parts = urlsplit(text if has_scheme else f"//{text}")
    problem = _url_problem(parts, has_scheme, grpc=protocol == "grpc")
    if problem:
        raise ConfigError(f"{source}: malformed endpoint {raw!r}: {problem}")
    if protocol == "grpc":
        return parts.netloc, parts.scheme == "http"
    if base:
        text = f"{text.rstrip('/')}/v1/{signal}"
    return text, False


def _url_problem(parts: SplitResult, has_scheme: bool, *, grpc: bool) -> str | None:
    if has_scheme and parts.scheme not in ("http", "https"):
        return f"the scheme must be http or https, not {parts.scheme!r}"
    if not has_scheme and not grpc:
        return "an HTTP endpoint needs a scheme (http:// or https://)"
    if not parts.hostname or any(c.isspace() for c in parts.netloc):
        return "no host, or white space in the address"
    try:
        port = parts.port
    except ValueError:
        return "the port is not a number between 0 and 65535"
    if grpc and not has_scheme and port is None:
        return "a gRPC endpoint without a scheme needs host:port"
    return None


def _insecure(
    signal: Signal, options: ExportOptions, env: Mapping[str, str], from_scheme: bool
) -> bool:
    if options.otlp_insecure is not None:
        if not isinstance(options.otlp_insecure, bool):
            raise ConfigError(
                f"otlp_insecure: expected True or False, got {options.otlp_insecure!r}"
            )
        return options.otlp_insecure
    value, source = _lookup("OTEL_EXPORTER_OTLP_INSECURE", None, "", signal, env)
    if value is None:
        return from_scheme
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{source}: expected 'true' or 'false', got {value!r}")


def _headers(signal: Signal, options: ExportOptions, env: Mapping[str, str]) -> dict[str, str]:
    value, source = _lookup("OTEL_EXPORTER_OTLP_HEADERS", None, "", signal, env)
    headers = parse_headers(value, source) if value else {}
    explicit = options.otlp_headers
    if isinstance(explicit, str):
        headers.update(parse_headers(explicit, "otlp_headers"))
    elif isinstance(explicit, Mapping):
        for key, item in explicit.items():
            if not isinstance(key, str) or not key or not isinstance(item, str):
                raise ConfigError("otlp_headers: keys and values must be non-empty strings")
            headers[key.strip().lower()] = item
    elif explicit is not None:
        raise ConfigError(
            f"otlp_headers: expected a dict or a 'key=value,...' string, got "
            f"{type(explicit).__name__}"
        )
    return headers


def _file(what: str, explicit: str | None, signal: Signal, env: Mapping[str, str]) -> str | None:
    value, source = _lookup(
        f"OTEL_EXPORTER_OTLP_{what}", explicit, f"otlp_{what.lower()}", signal, env
    )
    path = explicit if explicit is not None else value
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        raise ConfigError(f"{source}: no such file: {path!r}")
    return os.fspath(path)


def _timeout(signal: Signal, options: ExportOptions, env: Mapping[str, str]) -> float:
    if options.otlp_timeout is not None:
        raw: object = options.otlp_timeout
        source = "otlp_timeout"
    else:
        raw, source = _lookup("OTEL_EXPORTER_OTLP_TIMEOUT", None, "", signal, env)
        if raw is None:
            return _DEFAULT_TIMEOUT_S
    try:
        seconds = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(raw, bool) or not 0 < seconds < math.inf:
        raise ConfigError(f"{source}: expected a number of seconds > 0, got {raw!r}")
    return seconds


def _compression(
    signal: Signal, protocol: Protocol, options: ExportOptions, env: Mapping[str, str]
) -> str | None:
    value, source = _lookup(
        "OTEL_EXPORTER_OTLP_COMPRESSION", options.otlp_compression, "otlp_compression", signal, env
    )
    raw = options.otlp_compression if options.otlp_compression is not None else value
    text = (raw or "none").strip().lower() if isinstance(raw, (str, type(None))) else None
    allowed = ("gzip", "none") if protocol == "grpc" else ("gzip", "deflate", "none")
    if text not in allowed:
        raise ConfigError(
            f"{source}: unknown compression {raw!r} for {protocol}; use {', '.join(allowed)}"
        )
    return None if text == "none" else text


# -- Prometheus and batching ----------------------------------------------------------------


def _prometheus(
    explicit: str | int | bool | None, chosen: bool, env: Mapping[str, str], local_rank: int
) -> PrometheusSettings | None:
    if explicit is False or (explicit is None and not chosen):
        return None
    host = env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or _DEFAULT_PROMETHEUS_HOST
    source = "OTEL_EXPORTER_PROMETHEUS_PORT"
    port_text = env.get(source, "").strip() or str(_DEFAULT_PROMETHEUS_PORT)
    if explicit is None or explicit is True:
        pass
    elif isinstance(explicit, int):
        source, port_text = "prometheus", str(explicit)
    elif isinstance(explicit, str):
        source = "prometheus"
        text = explicit.strip()
        head, sep, tail = text.rpartition(":")
        if sep:
            host, port_text = head.strip("[]") or _DEFAULT_PROMETHEUS_HOST, tail
        else:
            port_text = text
    else:
        raise ConfigError(
            f"prometheus: expected 'host:port', a port or a bool, got {type(explicit).__name__}"
        )
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535 or not host:
        shown = explicit if source == "prometheus" else port_text
        raise ConfigError(f"{source}: expected host:port with a port 0-65535, got {shown!r}")
    port = int(port_text)
    return PrometheusSettings(host=host, port=port + local_rank if port else 0, source=source)


def _batch(env: Mapping[str, str]) -> BatchSettings:
    defaults = BatchSettings()
    values: dict[str, int] = {}
    for attr, variable in (
        ("schedule_delay_ms", "OTEL_BSP_SCHEDULE_DELAY"),
        ("export_timeout_ms", "OTEL_BSP_EXPORT_TIMEOUT"),
        ("max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE"),
        ("max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
    ):
        text = env.get(variable, "").strip()
        if not text:
            values[attr] = getattr(defaults, attr)
            continue
        if not text.isdigit() or int(text) < 1:
            raise ConfigError(f"{variable}: expected a whole number >= 1, got {text!r}")
        values[attr] = int(text)
    if values["max_export_batch_size"] > values["max_queue_size"]:
        raise ConfigError(
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE: must not exceed OTEL_BSP_MAX_QUEUE_SIZE "
            f"({values['max_export_batch_size']} > {values['max_queue_size']})"
        )
    return BatchSettings(**values)
