"""Every variable looptrace reads, in one table: variable, argument, CLI option, default.

The resolvers (`run_settings` for configure()'s own settings, `settings` and `otlp_settings`
for the exporters') take their defaults, bounds and choices from it and read the environment
through `env_value()`, which knows only the table's names; `looptrace replay` takes its
options' names and help from it, and the table of the docs' Configuration page is rendered
from it (`docs_rows()`; a test keeps the two equal and prints the rows). The OTLP variables also
exist per signal, with `TRACES_` or `METRICS_` after `OTEL_EXPORTER_OTLP_`; the per-signal
variable wins over the general one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from looptrace._core.sampling import DEFAULT_TRACE_EVERY, DEFAULT_TRACE_FIRST

_HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: its variable, the argument and option that override it, what it sets.

    `meaning` may name `{low}` and `{high}`, the bounds; `default` is the documented default
    when it is not simply `value`.
    """

    name: str
    argument: str | None
    meaning: str
    value: str | int | float | None = None
    default: str = ""
    per_signal: bool = False
    low: int | float | None = None
    high: int | float | None = None
    choices: tuple[str, ...] = ()
    option: str | None = None
    option_help: str = ""
    merges: bool = False  # the argument or option is merged over the variable, not instead

    @property
    def shown_meaning(self) -> str:
        """The meaning with its bounds filled in."""
        return self.meaning.format(low=_show(self.low), high=_show(self.high))

    @property
    def shown_default(self) -> str:
        """The default as the Configuration page shows it."""
        return self.default or f"`{_show(self.value)}`"


def _show(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


DEFAULT_ENDPOINTS = {"http/protobuf": "http://localhost:4318", "grpc": "http://localhost:4317"}

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "OTEL_SDK_DISABLED",
        None,
        "`true`: no spans and no exporters at all; statistics still work",
        "false",
    ),
    Setting("OTEL_SERVICE_NAME", "service_name", "`service.name` of the Resource", "looptrace"),
    Setting(
        "OTEL_TRACES_SAMPLER",
        "trace_every",
        "which steps are traced: `always_on` every one, `always_off` none, `traceidratio` "
        "every `round(1/r)`-th (each also as `parentbased_...`); the arguments `trace_every` "
        "and `trace_first` win over it",
        default=f"the first {DEFAULT_TRACE_FIRST} steps and every {DEFAULT_TRACE_EVERY}th",
        choices=("always_on", "always_off", "traceidratio"),
    ),
    Setting(
        "OTEL_TRACES_SAMPLER_ARG",
        None,
        "the ratio r of `traceidratio`, {low} to {high}",
        1.0,
        low=0.0,
        high=1.0,
    ),
    Setting(
        "LOOPTRACE_RUN_ID",
        "run_id",
        "the run, for trace ids shared by all ranks (one trace per step)",
        default="the launcher's job id (torchrun, Slurm, Open MPI), else random ids",
    ),
    Setting(
        "LOOPTRACE_TRACE_FILE",
        "trace_file",
        "append spans to this file as OTLP/JSON lines (`files` extra); `{{rank}}` is replaced "
        "by the rank, else jobs of several processes get `.rank<N>` before the suffix",
        default="none",
    ),
    Setting(
        "LOOPTRACE_SNAPSHOT_FILE",
        "snapshot_file",
        "append each `reset()` window's statistics to this file as JSON lines, named per rank "
        "like the span file",
        default="none",
    ),
    Setting(
        "OTEL_TRACES_EXPORTER",
        "traces_exporter",
        "`otlp`, `console` or `none` (comma-separated)",
        default="`otlp` when an OTLP endpoint is set, else `none`",
        choices=("otlp", "console", "none"),
    ),
    Setting(
        "OTEL_METRICS_EXPORTER",
        "metrics_exporter",
        "`otlp`, `prometheus` or `none` (comma-separated)",
        default="`otlp` when an OTLP endpoint is set, else `none`",
        choices=("otlp", "prometheus", "none"),
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "otlp_endpoint",
        "collector URL; over HTTP `/v1/traces` and `/v1/metrics` are appended, while a "
        "per-signal variable is used as given",
        default=f"`{DEFAULT_ENDPOINTS['http/protobuf']}` (HTTP), "
        f"`{DEFAULT_ENDPOINTS['grpc']}` (gRPC)",
        per_signal=True,
        option="--endpoint",
        option_help="collector URL; for http/protobuf, /v1/traces is added when it has no path",
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "otlp_protocol",
        "`http/protobuf` or `grpc`",
        "http/protobuf",
        per_signal=True,
        choices=("grpc", "http/protobuf"),
        option="--protocol",
        option_help="OTLP transport",
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "otlp_headers",
        "`key=value,key2=value2` (values URL-encoded) sent with every export; the argument "
        "(a dict or such a string) is merged over it",
        default="none",
        per_signal=True,
        merges=True,
        option="--header",
        option_help="a request header, repeatable, its value URL-encoded as in "
        "OTEL_EXPORTER_OTLP_HEADERS (which it is added to)",
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "otlp_certificate",
        "PEM file of the CA that signed the collector's certificate",
        default="the system's CAs",
        per_signal=True,
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        "otlp_client_certificate",
        "PEM client certificate for mutual TLS",
        default="none",
        per_signal=True,
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        "otlp_client_key",
        "PEM private key of the client certificate",
        default="none",
        per_signal=True,
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_INSECURE",
        "otlp_insecure",
        "gRPC only: `true` for plaintext, `false` for TLS",
        default="from the scheme: `http://` plaintext, `https://` or none TLS",
        per_signal=True,
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "otlp_timeout",
        "time one export may take, retries included, in seconds as the Python exporters read "
        "it (the specification says milliseconds), at most {high}; also bounds `shutdown()`",
        10.0,
        per_signal=True,
        high=3600.0,  # also bounds shutdown(); a larger value is a unit mistake (ms?)
        option="--timeout",
        option_help="seconds per request",
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "otlp_compression",
        "`gzip`, `none`, or `deflate` (HTTP only)",
        "none",
        per_signal=True,
        choices=("gzip", "deflate", "none"),
    ),
    Setting(
        "LOOPTRACE_HISTOGRAM",
        "histogram",
        "how OTLP metrics (the push, an application's MeterProvider) carry section durations: "
        "`explicit` buckets (five per decade, as Prometheus scrapes them) or `exponential`, "
        "base-2 buckets at scale 7 (within 1 %) for backends with native histograms",
        "explicit",
        choices=("explicit", "exponential"),
    ),
    Setting(
        "LOOPTRACE_DETAIL_RANKS",
        "detail_ranks",
        "with `reset(across_ranks=True)`, how many of the slowest ranks of each window (and any "
        "chronic straggler) serve their full per-section metrics; the others serve a few series "
        "each; `all`: every rank",
        8,
        low=0,
        high=1_000_000,
    ),
    Setting(
        "LOOPTRACE_JOB_RANK",
        "job_rank",
        "the rank that serves and pushes the job's histograms (summed over the ranks in "
        "`reset(across_ranks=True)`), without a rank label",
        0,
        low=0,
        high=1_000_000_000,
    ),
    Setting(
        "OTEL_EXPORTER_PROMETHEUS_HOST",
        "prometheus",
        "address the Prometheus endpoint binds",
        "127.0.0.1",
    ),
    Setting(
        "OTEL_EXPORTER_PROMETHEUS_PORT",
        "prometheus",
        "port of the Prometheus endpoint; each process adds its local rank",
        9464,
        low=0,
        high=65535,
    ),
    # Bounds of the `OTEL_BSP_*` values: beyond them the SDK's batch thread dies (a wait longer
    # than the platform's timeout) or a queue could hold more spans than memory.
    Setting(
        "OTEL_BSP_SCHEDULE_DELAY",
        None,
        "milliseconds between two span exports ({low} to {high})",
        5000,
        low=1,
        high=_HOUR_MS,
    ),
    Setting(
        "OTEL_BSP_EXPORT_TIMEOUT",
        None,
        "passed to the `BatchSpanProcessor` ({low} to {high}); each export is bounded by the "
        "OTLP timeout",
        30000,
        low=1,
        high=_HOUR_MS,
    ),
    # Room for ~1500 fully traced steps of 20 sections while the collector lags (about 3 KB
    # per queued span): the SDK's 2048 dropped 42 % of such a loop.
    Setting(
        "OTEL_BSP_MAX_QUEUE_SIZE",
        None,
        "spans waiting for export (about 3 KB each; {low} to {high}); more are dropped and counted",
        32768,
        low=1,
        high=1_000_000,
    ),
    Setting(
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        None,
        "spans per export request (at most the queue size)",
        512,
        low=1,
        high=1_000_000,
    ),
    Setting(
        "LOOPTRACE_SLOW_LAP_FACTOR",
        "slow_lap_factor",
        "an untraced step that takes more than this many times its timer's recent median "
        "(a number above {low}) is traced in full; `off` (the argument: `None`) turns it off",
        3.0,
        low=1.0,
    ),
    # A floor of a minute: a step that slow is rare outside a hang, and it is found ten or
    # more times sooner than a collective's own timeout (10 to 30 minutes) ends the job.
    Setting(
        "LOOPTRACE_HANG_AFTER",
        "hang_after",
        "seconds an open step must last, at least, to be reported as hung (the floor of its "
        "threshold; {low} to {high}); `0` turns the hang watchdog off",
        60.0,
        low=0.0,
        high=86400.0,
    ),
    # Ten times the recent step time: an evaluation or checkpoint step several times longer
    # than a training step still passes, while a hang of a slow loop is found in ten steps.
    Setting(
        "LOOPTRACE_HANG_FACTOR",
        "hang_factor",
        "an open step is hung past this many times its timer's recent step time (at least "
        "`LOOPTRACE_HANG_AFTER`; {low} to {high})",
        10.0,
        low=1.0,
        high=10000.0,
    ),
    Setting(
        "LOOPTRACE_DIAGNOSE",
        "diagnose",
        "`log`: log each finding of the diagnosis (warning or worse) to the `looptrace` "
        "logger once when it appears and once when it clears, at each window's close; `off`: "
        "no log",
        "off",
        choices=("off", "log"),
    ),
    Setting(
        "LOOPTRACE_INSTRUMENT",
        None,
        "under `looptrace run` or `opentelemetry-instrument`: the parts of a PyTorch loop "
        "timed (comma-separated of `data`, `forward`, `backward`, `optimizer`, `checkpoint`; "
        "`none`: no patch)",
        "data,forward,backward,optimizer,checkpoint",
    ),
    Setting(
        "LOOPTRACE_SYSTEM_INTERVAL",
        None,
        "under `looptrace run` or `opentelemetry-instrument`: sample the process's and host's "
        "CPU and memory (psutil) and NVIDIA GPUs (nvidia-ml-py) every this many seconds, at "
        "least {low}, into each window; `off`: no sampling",
        1.0,
        low=0.1,
    ),
    Setting(
        "LOOPTRACE_RUN_DIR",
        None,
        "set by `looptrace run`: its run folder; a Python process started with it (and the "
        "run's `PYTHONPATH`) instruments PyTorch at start",
        default="none",
    ),
    Setting(
        "LOOPTRACE_RESET_EVERY",
        None,
        "under `looptrace run` or `opentelemetry-instrument`: close a window every this many "
        "steps ({low} to {high}), across ranks in a job of several",
        100,
        low=1,
        high=1_000_000_000,
    ),
)

_BY_NAME = {setting.name: setting for setting in SETTINGS}
_PER_SIGNAL = re.compile(r"^OTEL_EXPORTER_OTLP_(?:TRACES|METRICS)_")


def setting(name: str) -> Setting:
    """Return the setting of variable `name` (its general form for the per-signal ones)."""
    return _BY_NAME[name]


def env_value(name: str, environ: Mapping[str, str]) -> str:
    """Return the value of variable `name` in `environ`, `""` when unset.

    Only the table's variables (and the per-signal forms of its OTLP ones) can be read:
    any other name is a `KeyError`, so a variable looptrace reads is a documented one.
    """
    general = _PER_SIGNAL.sub("OTEL_EXPORTER_OTLP_", name, count=1)
    if name not in _BY_NAME and not (general in _BY_NAME and _BY_NAME[general].per_signal):
        raise KeyError(f"{name} is not a variable of the settings table")
    return environ.get(name, "")


def int_value(name: str) -> int:
    """Return the default of an integer setting."""
    value = _BY_NAME[name].value
    if not isinstance(value, int):
        raise TypeError(f"{name} has no integer default")
    return value


def float_value(name: str) -> float:
    """Return the default of a number setting."""
    value = _BY_NAME[name].value
    if not isinstance(value, (int, float)):
        raise TypeError(f"{name} has no number default")
    return float(value)


def str_value(name: str) -> str:
    """Return the default of a text setting."""
    value = _BY_NAME[name].value
    if not isinstance(value, str):
        raise TypeError(f"{name} has no text default")
    return value


def high(name: str) -> int | float:
    """Return the upper bound of a bounded setting."""
    bound = _BY_NAME[name].high
    if bound is None:
        raise TypeError(f"{name} has no upper bound")
    return bound


def int_bounds(name: str) -> tuple[int, int]:
    """Return the lowest and highest value of a whole-number setting."""
    low, top = _BY_NAME[name].low, _BY_NAME[name].high
    if not isinstance(low, int) or not isinstance(top, int):
        raise TypeError(f"{name} has no whole-number bounds")
    return low, top


def number_bounds(name: str) -> tuple[float, float]:
    """Return the lowest and highest value of a bounded number setting."""
    low, top = _BY_NAME[name].low, _BY_NAME[name].high
    if low is None or top is None:
        raise TypeError(f"{name} has no bounds")
    return float(low), float(top)


def signal_variable(name: str, signal: str) -> str:
    """Return the per-signal form of an OTLP variable (`..._OTLP_TRACES_ENDPOINT`)."""
    return name.replace("OTEL_EXPORTER_OTLP_", f"OTEL_EXPORTER_OTLP_{signal.upper()}_", 1)


def option_help(name: str, signal: str = "traces") -> str:
    """Return the CLI help of a setting: what it sets, then where its default comes from."""
    entry = _BY_NAME[name]
    if entry.merges:
        return entry.option_help
    variables = [signal_variable(entry.name, signal)] if entry.name.endswith("ENDPOINT") else []
    variables.append(entry.name)
    fallback = "" if entry.value is None else f", else {_show(entry.value)}"
    return f"{entry.option_help} (default: {', then '.join(variables)}{fallback})"


def docs_rows() -> list[str]:
    """Return the Configuration page's settings table, header included, one Markdown line a row."""
    rows = [
        "| variable | argument of `configure()` | meaning | default |",
        "| --- | --- | --- | --- |",
    ]
    for entry in SETTINGS:
        name = entry.name
        if entry.per_signal:
            name = name.replace("OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_[TRACES_\\|METRICS_]")
        argument = f"`{entry.argument}`" if entry.argument else "—"
        rows.append(f"| `{name}` | {argument} | {entry.shown_meaning} | {entry.shown_default} |")
    return rows
