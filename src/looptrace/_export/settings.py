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

from looptrace._base.errors import ConfigError
from looptrace._export.exponential import HISTOGRAM_KINDS, HistogramKind
from looptrace._export.otlp_settings import DEFAULT_TIMEOUT_S, OtlpSettings, Signal, otlp_settings
from looptrace._export.settings_table import (
    env_value,
    float_value,
    int_bounds,
    int_value,
    number_bounds,
    setting,
    signal_variable,
    str_value,
)

_TRACE_EXPORTERS = frozenset(setting("OTEL_TRACES_EXPORTER").choices)
_METRIC_EXPORTERS = frozenset(setting("OTEL_METRICS_EXPORTER").choices)
_DEFAULT_PROMETHEUS_HOST = str_value("OTEL_EXPORTER_PROMETHEUS_HOST")
_DEFAULT_PROMETHEUS_PORT = int_value("OTEL_EXPORTER_PROMETHEUS_PORT")
_PORT_LOW, _PORT_HIGH = int_bounds("OTEL_EXPORTER_PROMETHEUS_PORT")
_HISTOGRAM = "LOOPTRACE_HISTOGRAM"
_SLOW_LAP = "LOOPTRACE_SLOW_LAP_FACTOR"
_SLOW_LAP_LOW = float(setting(_SLOW_LAP).low or 1.0)

SlowLapFactor = float | Literal["auto", "off"] | None  # `configure(slow_lap_factor=...)`


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
    histogram: HistogramKind = "explicit"  # resolved by `histogram_kind()`


@dataclass(frozen=True)
class PrometheusSettings:
    """Where the Prometheus pull endpoint listens; `source` names the setting for errors."""

    host: str
    port: int
    source: str
    local_rank: int = 0  # added to the port chosen, so the processes of a node differ


@dataclass(frozen=True)
class BatchSettings:
    """The `BatchSpanProcessor` parameters (`OTEL_BSP_*`)."""

    schedule_delay_ms: int = int_value("OTEL_BSP_SCHEDULE_DELAY")
    export_timeout_ms: int = int_value("OTEL_BSP_EXPORT_TIMEOUT")
    max_queue_size: int = int_value("OTEL_BSP_MAX_QUEUE_SIZE")
    max_export_batch_size: int = int_value("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")


@dataclass(frozen=True)
class ExportSettings:
    """Every exporter looptrace builds, resolved and validated."""

    traces: OtlpSettings | None = None
    console_traces: bool = False
    metrics: OtlpSettings | None = None
    prometheus: PrometheusSettings | None = None
    batch: BatchSettings = field(default_factory=BatchSettings)
    histogram: HistogramKind = "explicit"

    @property
    def any(self) -> bool:
        """Whether there is anything to export."""
        return bool(self.traces or self.console_traces or self.metrics or self.prometheus)

    @property
    def timeout_s(self) -> float:
        """The longest OTLP timeout: the bound on a flush and on `shutdown()`."""
        timeouts = [s.timeout_s for s in (self.traces, self.metrics) if s is not None]
        return max(timeouts, default=DEFAULT_TIMEOUT_S)


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
        traces=otlp_settings("traces", options, env) if "otlp" in traces else None,
        console_traces="console" in traces,
        metrics=otlp_settings("metrics", options, env) if "otlp" in metrics else None,
        prometheus=prometheus,
        batch=_batch(env) if traces - {"none"} else BatchSettings(),
        histogram=options.histogram,
    )


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
    if owns and env_value(variable, env).strip():
        return _names(env_value(variable, env), variable, allowed)
    endpoint_set = options.otlp_endpoint is not None or (
        owns
        and bool(
            env_value("OTEL_EXPORTER_OTLP_ENDPOINT", env)
            or env_value(signal_variable("OTEL_EXPORTER_OTLP_ENDPOINT", signal), env)
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


# -- Prometheus and batching ----------------------------------------------------------------


def _prometheus(
    explicit: str | int | bool | None, chosen: bool, env: Mapping[str, str], local_rank: int
) -> PrometheusSettings | None:
    if explicit is False or (explicit is None and not chosen):
        return None
    host = env_value("OTEL_EXPORTER_PROMETHEUS_HOST", env).strip() or _DEFAULT_PROMETHEUS_HOST
    source = "OTEL_EXPORTER_PROMETHEUS_PORT"
    port_text = env_value(source, env).strip() or str(_DEFAULT_PROMETHEUS_PORT)
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
    shown = explicit if source == "prometheus" else port_text
    if not (port_text.isascii() and port_text.isdigit()) or not (
        _PORT_LOW <= int(port_text) <= _PORT_HIGH
    ):
        raise ConfigError(
            f"{source}: expected host:port with a port {_PORT_LOW}-{_PORT_HIGH}, got {shown!r}"
        )
    if not host or not host.isascii() or not host.isprintable() or " " in host:
        raise ConfigError(f"{source}: expected host:port with a host name or address, got {host!r}")
    port = int(port_text)
    if port and port + local_rank > _PORT_HIGH:
        raise ConfigError(
            f"{source}: port {port} plus the local rank {local_rank} is above {_PORT_HIGH}; "
            "choose a lower port"
        )
    return PrometheusSettings(
        host=host, port=port + local_rank if port else 0, source=source, local_rank=local_rank
    )


def _batch(env: Mapping[str, str]) -> BatchSettings:
    defaults = BatchSettings()
    values: dict[str, int] = {}
    for attr, variable in (
        ("schedule_delay_ms", "OTEL_BSP_SCHEDULE_DELAY"),
        ("export_timeout_ms", "OTEL_BSP_EXPORT_TIMEOUT"),
        ("max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE"),
        ("max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
    ):
        text = env_value(variable, env).strip()
        if not text:
            values[attr] = getattr(defaults, attr)
            continue
        low, limit = int_bounds(variable)
        if not (text.isascii() and text.isdigit()) or not low <= int(text) <= limit:
            raise ConfigError(
                f"{variable}: expected a whole number from {low} to {limit}, got {text[:40]!r}"
            )
        values[attr] = int(text)
    if values["max_export_batch_size"] > values["max_queue_size"]:
        raise ConfigError(
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE: must not exceed OTEL_BSP_MAX_QUEUE_SIZE "
            f"({values['max_export_batch_size']} > {values['max_queue_size']})"
        )
    return BatchSettings(**values)


# -- histogram kind ----------------------------------------------------------------------


def histogram_kind(argument: object, environ: Mapping[str, str] | None = None) -> HistogramKind:
    """Resolve `histogram`: `"explicit"` or `"exponential"`; None takes `LOOPTRACE_HISTOGRAM`.

    Raises:
        ConfigError: any other value, naming the argument or the variable.

    """
    shown: object
    if argument is None:
        env = os.environ if environ is None else environ
        text = env_value(_HISTOGRAM, env).strip() or str_value(_HISTOGRAM)
        source, shown = _HISTOGRAM, text[:40]
    else:
        source, shown = "histogram", argument
        text = argument if isinstance(argument, str) else ""
    for kind in HISTOGRAM_KINDS:
        if text.lower() == kind:
            return kind
    raise ConfigError(
        f"{source}: expected {' or '.join(map(repr, HISTOGRAM_KINDS))}, got {shown!r}"[:200]
    )


# -- slow laps ---------------------------------------------------------------------------


def slow_lap_factor(
    argument: SlowLapFactor, environ: Mapping[str, str] | None = None
) -> float | None:
    """Resolve `slow_lap_factor`: a number, `None` or `"off"` (off), or `"auto"` (the variable).

    `"auto"` takes `LOOPTRACE_SLOW_LAP_FACTOR` (a number or `off`), else the table's default.
    """
    if argument is None or argument == "off":
        return None
    if argument == "auto":
        env = os.environ if environ is None else environ
        text = env_value(_SLOW_LAP, env).strip()
        if not text:
            return float_value(_SLOW_LAP)
        if text.lower() == "off":
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        return _checked_factor(value, _SLOW_LAP, text[:40])
    if isinstance(argument, bool) or not isinstance(argument, (int, float)):
        raise ConfigError(
            f"slow_lap_factor: expected a number, None, 'off' or 'auto', got {argument!r}"[:200]
        )
    return _checked_factor(float(argument), "slow_lap_factor", argument)


def _checked_factor(value: float, source: str, shown: object) -> float:
    if not (math.isfinite(value) and value > _SLOW_LAP_LOW):
        raise ConfigError(
            f"{source}: expected a number above {_SLOW_LAP_LOW:g} or 'off', got {shown!r}"
        )
    return value


# -- diagnosis log -----------------------------------------------------------------------

DiagnoseMode = Literal["off", "log"]
_DIAGNOSE = "LOOPTRACE_DIAGNOSE"


def diagnose_mode(argument: object, environ: Mapping[str, str] | None = None) -> DiagnoseMode:
    """Resolve `diagnose`: `"off"` or `"log"`; None takes `LOOPTRACE_DIAGNOSE`, else `"off"`.

    Raises:
        ConfigError: any other value, naming the argument or the variable.

    """
    shown: object
    if argument is None:
        env = os.environ if environ is None else environ
        text = env_value(_DIAGNOSE, env).strip() or str_value(_DIAGNOSE)
        source, shown = _DIAGNOSE, text[:40]
    else:
        source, shown = "diagnose", argument
        text = argument if isinstance(argument, str) else ""
    for mode in setting(_DIAGNOSE).choices:
        if text.lower() == mode:
            return "log" if mode == "log" else "off"
    choices = " or ".join(map(repr, setting(_DIAGNOSE).choices))
    raise ConfigError(f"{source}: expected {choices}, got {shown!r}"[:200])


# -- hang watchdog -----------------------------------------------------------------------

_AFTER = "LOOPTRACE_HANG_AFTER"
_FACTOR = "LOOPTRACE_HANG_FACTOR"


def hang_after(argument: float | None, environ: Mapping[str, str] | None = None) -> float:
    """Resolve the threshold's floor in seconds (0: no watchdog); None reads the variable.

    Raises:
        ConfigError: a value that is not a number within the table's bounds.

    """
    return _resolve(argument, "hang_after", _AFTER, environ)


def hang_factor(argument: float | None, environ: Mapping[str, str] | None = None) -> float:
    """Resolve the multiple of the recent step time; None reads the variable.

    Raises:
        ConfigError: a value that is not a number within the table's bounds.

    """
    return _resolve(argument, "hang_factor", _FACTOR, environ)


def _resolve(
    argument: float | None, name: str, variable: str, environ: Mapping[str, str] | None
) -> float:
    low, high = number_bounds(variable)
    shown: object
    if argument is None:
        env = os.environ if environ is None else environ
        text = env_value(variable, env).strip()
        if not text:
            return float_value(variable)
        source, shown = variable, text[:40]
        try:
            value = float(text)
        except ValueError:
            value = math.nan
    else:
        source, shown = name, argument
        if isinstance(argument, bool) or not isinstance(argument, (int, float)):
            raise ConfigError(f"{name}: expected a number, got {argument!r}"[:200])
        value = float(argument)
    if not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(f"{source}: expected a number from {low:g} to {high:g}, got {shown!r}")
    return value
