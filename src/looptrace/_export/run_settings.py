"""configure()'s own settings (the exporters' are `settings`): arguments over variables.

Each one falls back to its variable of the settings table, read through the table, then to
the table's default. The trace sampler maps the standard `OTEL_TRACES_SAMPLER` values onto
steps, since looptrace samples whole steps itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from looptrace._core.sampling import (
    DEFAULT_TRACE_EVERY,
    DEFAULT_TRACE_FIRST,
    LapSampler,
)
from looptrace._core.sampling import (
    lap_sampler as checked_sampler,
)
from looptrace._export.files import PathLike
from looptrace._export.settings_table import (
    env_value,
    float_value,
    number_bounds,
    setting,
    str_value,
)
from looptrace._stats.errors import ConfigError

_SAMPLER = "OTEL_TRACES_SAMPLER"
_SAMPLER_ARG = "OTEL_TRACES_SAMPLER_ARG"


@dataclass(frozen=True)
class RunSettings:
    """What `configure()` sets up besides the exporters, resolved and validated."""

    service_name: str
    disabled: bool
    sampler: LapSampler
    run_id: str | None
    trace_file: PathLike | None
    snapshot_file: PathLike | None


def resolve_run(
    *,
    service_name: str | None,
    trace_every: int | None,
    trace_first: int | None,
    run_id: str | None,
    trace_file: PathLike | None,
    snapshot_file: PathLike | None,
    environ: Mapping[str, str] | None = None,
) -> RunSettings:
    """Resolve configure()'s own arguments over their variables, then the table's defaults.

    Raises:
        ConfigError: naming the argument or variable that cannot be used.

    """
    env = os.environ if environ is None else environ
    return RunSettings(
        sampler=lap_sampler(trace_every, trace_first, env),
        service_name=(
            service_name or env_value("OTEL_SERVICE_NAME", env) or str_value("OTEL_SERVICE_NAME")
        ),
        disabled=env_value("OTEL_SDK_DISABLED", env).strip().lower() == "true",
        run_id=run_id or env_value("LOOPTRACE_RUN_ID", env) or None,
        trace_file=trace_file if trace_file is not None else _path("LOOPTRACE_TRACE_FILE", env),
        snapshot_file=(
            snapshot_file if snapshot_file is not None else _path("LOOPTRACE_SNAPSHOT_FILE", env)
        ),
    )


def lap_sampler(
    trace_every: int | None, trace_first: int | None, env: Mapping[str, str]
) -> LapSampler:
    """Combine explicit arguments, `OTEL_TRACES_SAMPLER[_ARG]`, and the defaults.

    Explicit arguments win; `trace_every` alone means exactly that (`trace_first=0`). The
    standard samplers map onto laps: `always_on` traces every lap, `always_off` none,
    `traceidratio` with argument r every `round(1/r)`-th lap (the `parentbased_` variants
    alike, since a lap span has no parent to follow).
    """
    every, first = _from_otel_sampler(env)
    if trace_every is not None:
        every, first = trace_every, 0
    if trace_first is not None:
        first = trace_first
    return checked_sampler(every, first)


def _from_otel_sampler(env: Mapping[str, str]) -> tuple[int, int]:
    """Return (trace_every, trace_first) as `OTEL_TRACES_SAMPLER[_ARG]` ask."""
    raw = env_value(_SAMPLER, env)
    name = raw.strip().lower().removeprefix("parentbased_")
    if not name:
        return DEFAULT_TRACE_EVERY, DEFAULT_TRACE_FIRST
    if name == "always_on":
        return 1, 0
    if name == "always_off":
        return 0, 0
    if name == "traceidratio":
        return _every_for_ratio(env), 0
    raise ConfigError(
        f"{_SAMPLER}={raw!r} is not one of {', '.join(setting(_SAMPLER).choices)} "
        "(optionally parentbased_)"
    )


def _every_for_ratio(env: Mapping[str, str]) -> int:
    """Return the step interval of `traceidratio`: every `round(1/r)`-th, none for r = 0."""
    raw = env_value(_SAMPLER_ARG, env) or str(float_value(_SAMPLER_ARG))
    try:
        ratio = float(raw)
    except ValueError:
        raise ConfigError(f"{_SAMPLER_ARG}={raw!r} is not a number") from None
    low, top = number_bounds(_SAMPLER_ARG)
    if not low <= ratio <= top:
        raise ConfigError(f"{_SAMPLER_ARG}={raw!r} is not within [{low:g}, {top:g}]")
    return 0 if ratio == 0 else max(1, round(1 / ratio))


def _path(name: str, env: Mapping[str, str]) -> str | None:
    return env_value(name, env) or None
