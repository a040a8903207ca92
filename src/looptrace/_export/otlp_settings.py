"""OTLP settings of one signal: endpoint, protocol, TLS, headers, timeout, compression.

Each comes from the `configure()` argument, else the per-signal variable
(`OTEL_EXPORTER_OTLP_TRACES_*`), else the general one, else the default; each is checked
here and a bad one is a `ConfigError` naming where it came from.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import SplitResult, unquote, urlsplit

from looptrace._base.errors import ConfigError
from looptrace._export.settings_table import (
    DEFAULT_ENDPOINTS,
    env_value,
    float_value,
    high,
    setting,
    signal_variable,
    str_value,
)

if TYPE_CHECKING:
    from looptrace._export.settings import ExportOptions

Signal = Literal["traces", "metrics"]
Protocol = Literal["grpc", "http/protobuf"]

DEFAULT_TIMEOUT_S = float_value("OTEL_EXPORTER_OTLP_TIMEOUT")
MAX_TIMEOUT_S = float(high("OTEL_EXPORTER_OTLP_TIMEOUT"))
_DEFAULT_PROTOCOL = str_value("OTEL_EXPORTER_OTLP_PROTOCOL")
_DEFAULT_COMPRESSION = str_value("OTEL_EXPORTER_OTLP_COMPRESSION")
_COMPRESSIONS = setting("OTEL_EXPORTER_OTLP_COMPRESSION").choices
_BLANK = " \t"  # what may surround an item; a line break inside one is an error
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


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


def parse_headers(text: str, source: str) -> dict[str, str]:
    """Parse `key=value,key2=value2` (values URL-encoded) into lower-case keys and values.

    Raises:
        ConfigError: an item is not `key=value`, or a name or value cannot be sent (see
            `check_header`); the message names the item or header, never a value.

    """
    headers: dict[str, str] = {}
    for number, item in enumerate(text.split(","), 1):
        if not item.strip(_BLANK):
            continue
        key, sep, value = item.partition("=")
        key = key.strip(_BLANK).lower()
        if not sep or not key:
            raise ConfigError(
                f"{source}: cannot parse item {number} of the header list; expected "
                "key=value pairs separated by commas (values are not shown)"
            )
        try:
            decoded = unquote(value.strip(_BLANK), errors="strict")
        except UnicodeDecodeError:
            decoded = "\x80"  # an invalid escape: rejected below like any non-ASCII value
        headers[key] = check_header(key, decoded, source)
    return headers


def check_header(key: str, value: str, source: str) -> str:
    """Return `value` if header `key: value` can be sent over HTTP and gRPC alike.

    Names are ASCII letters, digits, `-`, `_` and `.` (gRPC's rule, lower-cased); values are
    printable ASCII without surrounding spaces: a control character (a token read with its
    trailing newline) would make every export fail, and the exporters would log the value.

    Raises:
        ConfigError: naming the header and the problem, never showing the value.

    """
    if not key or not set(key) <= _NAME_CHARS:
        raise ConfigError(
            f"{source}: header name {key[:40]!r} may only hold ASCII letters, digits, '-', '_' "
            "and '.' (values are not shown)"
        )
    if any(not " " <= c <= "~" for c in value) or value != value.strip(" "):
        raise ConfigError(
            f"{source}: the value of header {key!r} holds a control character (a trailing "
            "newline?), a non-ASCII character or surrounding spaces; the value is not shown"
        )
    return value


def _lookup(
    name: str, explicit: object, argument: str, signal: Signal, env: Mapping[str, str]
) -> tuple[str | None, str]:
    """Return (value, source): the argument, else the per-signal variable, else the general."""
    if explicit is not None:
        return None, argument
    for variable in (signal_variable(name, signal), name):
        value = env_value(variable, env).strip()
        if value:
            return value, variable
    return None, name


def otlp_settings(signal: Signal, options: ExportOptions, env: Mapping[str, str]) -> OtlpSettings:
    """Resolve how `signal` reaches its OTLP receiver: argument, per-signal or general variable."""
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
    text = (raw or _DEFAULT_PROTOCOL).strip().lower()
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
        general = "OTEL_EXPORTER_OTLP_ENDPOINT"
        if env_value(per_signal, env).strip():
            raw, source, base = env_value(per_signal, env), per_signal, False
        elif env_value(general, env).strip():
            raw, source, base = env_value(general, env), general, True
        else:
            raw, source, base = DEFAULT_ENDPOINTS[protocol], "the default endpoint", True
    if not isinstance(raw, str):
        raise ConfigError(f"{source}: expected a URL string, got {type(raw).__name__}")
    text = raw.strip()
    has_scheme = "://" in text
    try:
        parts = urlsplit(text if has_scheme else f"//{text}")
    except ValueError as error:  # an unclosed IPv6 bracket
        raise ConfigError(f"{source}: malformed endpoint {raw!r}: {error}") from None
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
    address = parts.netloc + parts.path + parts.query
    if not parts.hostname or any(not "!" <= c <= "~" for c in address):
        return "no host, or white space, control or non-ASCII characters in the address"
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
            name = key.strip().lower()
            headers[name] = check_header(name, item, "otlp_headers")
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
            return DEFAULT_TIMEOUT_S
    try:
        seconds = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(raw, bool) or not 0 < seconds <= MAX_TIMEOUT_S:
        raise ConfigError(
            f"{source}: expected a number of seconds > 0 and <= {MAX_TIMEOUT_S:g} (the Python "
            f"exporters read seconds, not milliseconds), got {raw!r}"
        )
    return seconds


def _compression(
    signal: Signal, protocol: Protocol, options: ExportOptions, env: Mapping[str, str]
) -> str | None:
    value, source = _lookup(
        "OTEL_EXPORTER_OTLP_COMPRESSION", options.otlp_compression, "otlp_compression", signal, env
    )
    raw = options.otlp_compression if options.otlp_compression is not None else value
    text = (
        (raw or _DEFAULT_COMPRESSION).strip().lower()
        if isinstance(raw, (str, type(None)))
        else None
    )
    allowed = tuple(c for c in _COMPRESSIONS if protocol != "grpc" or c != "deflate")
    if text not in allowed:
        raise ConfigError(
            f"{source}: unknown compression {raw!r} for {protocol}; use {', '.join(allowed)}"
        )
    return None if text == "none" else text
