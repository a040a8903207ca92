"""configure()'s own settings (the exporters' are `settings`): arguments over variables.

Each one falls back to its variable of the settings table, read through the table, then to
the table's default. The trace sampler maps the standard `OTEL_TRACES_SAMPLER` values onto
steps, since looptrace samples whole steps itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from looptrace._base.errors import ConfigError
from looptrace._core.sampling import (
    DEFAULT_TRACE_EVERY,
    DEFAULT_TRACE_FIRST,
    LapSampler,
)
from looptrace._core.sampling import (
    lap_sampler as checked_sampler,
)
from looptrace._distributed.job_histograms import DetailRanks, Scale
from looptrace._export.files import PathLike
from looptrace._export.settings_table import (
    env_value,
    float_value,
    int_bounds,
    int_value,
    number_bounds,
    setting,
    str_value,
)

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


_DETAIL = "LOOPTRACE_DETAIL_RANKS"
_JOB_RANK = "LOOPTRACE_JOB_RANK"


def scale(
    detail_ranks: object,
    job_rank: object,
    world_size: int,
    environ: Mapping[str, str] | None = None,
) -> Scale:
    """Resolve `detail_ranks` and `job_rank` over their variables, then the table's defaults.

    Raises:
        ConfigError: a value that is not a whole number in range (or `"all"` for
            `detail_ranks`), or a `job_rank` the job does not have.

    """
    env = os.environ if environ is None else environ
    detail: DetailRanks
    if detail_ranks is None:
        text = env_value(_DETAIL, env).strip()
        detail = "all" if text.lower() == "all" else _whole(text, _DETAIL, int_value(_DETAIL))
    elif detail_ranks == "all":
        detail = "all"
    else:
        detail = _whole(detail_ranks, "detail_ranks", None, "a whole number or 'all'")
    if job_rank is None:
        rank = _whole(env_value(_JOB_RANK, env).strip(), _JOB_RANK, int_value(_JOB_RANK))
        source = _JOB_RANK
    else:
        rank, source = _whole(job_rank, "job_rank", None), "job_rank"
    if rank >= world_size:
        raise ConfigError(f"{source}: rank {rank} is not in a job of {world_size} ranks")
    return Scale(detail_ranks=detail, job_rank=rank)


def _whole(value: object, source: str, default: int | None, wanted: str = "") -> int:
    """Return `value` (an int, or text of one; empty text: `default`) within its bounds."""
    variable = _DETAIL if source in (_DETAIL, "detail_ranks") else _JOB_RANK
    low, top = int_bounds(variable)
    wanted = wanted or f"a whole number from {low} to {top}"
    if isinstance(value, str):
        text = value.strip()
        if not text and default is not None:
            return default
        number = int(text) if text.isascii() and text.isdigit() else None
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        number = None
    if number is None or not low <= number <= top:
        raise ConfigError(f"{source}: expected {wanted}, got {value!r}"[:200])
    return number
