"""Instrument a PyTorch program from its environment, as `looptrace run` and the instrumentor do.

`instrument_from_environment()` configures looptrace (every `OTEL_*` and `LOOPTRACE_*`
variable honoured) and calls `looptrace.integrations.torch.instrument()` with the parts named
by `LOOPTRACE_INSTRUMENT`, closing a window every `LOOPTRACE_RESET_EVERY` steps.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from looptrace._base.errors import ConfigError
from looptrace._export.settings_table import (
    env_value,
    float_value,
    int_bounds,
    int_value,
    setting,
    str_value,
)

if TYPE_CHECKING:
    from looptrace._looptrace import Looptrace
    from looptrace.integrations.torch import Instrumented

__all__ = [
    "PARTS",
    "current",
    "instrument_from_environment",
    "parts_of",
    "reset_every_of",
    "system_interval_of",
]

PARTS = ("data", "forward", "backward", "optimizer", "checkpoint")


def parts_of(environ: Mapping[str, str]) -> frozenset[str]:
    """Return the parts `LOOPTRACE_INSTRUMENT` names (all when unset; none for `none`).

    Raises:
        ConfigError: a name that is not one of `PARTS`, named.

    """
    text = env_value("LOOPTRACE_INSTRUMENT", environ).strip() or str_value("LOOPTRACE_INSTRUMENT")
    if text == "none":
        return frozenset()
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(PARTS))
    if unknown:
        raise ConfigError(
            f"LOOPTRACE_INSTRUMENT: unknown part {', '.join(map(repr, unknown))}; "
            f"choose from {', '.join(PARTS)} or none"
        )
    return frozenset(names)


def reset_every_of(environ: Mapping[str, str]) -> int:
    """Return `LOOPTRACE_RESET_EVERY` (its default when unset).

    Raises:
        ConfigError: not a whole number within the table's bounds.

    """
    text = env_value("LOOPTRACE_RESET_EVERY", environ).strip()
    if not text:
        return int_value("LOOPTRACE_RESET_EVERY")
    low, high = int_bounds("LOOPTRACE_RESET_EVERY")
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ConfigError(f"LOOPTRACE_RESET_EVERY: a whole number {low} to {high}, got {text!r}")
    return value


def system_interval_of(environ: Mapping[str, str]) -> float | None:
    """Return `LOOPTRACE_SYSTEM_INTERVAL` in seconds (its default when unset; None for `off`).

    Raises:
        ConfigError: neither `off` nor a number within the table's bound.

    """
    text = env_value("LOOPTRACE_SYSTEM_INTERVAL", environ).strip()
    if text == "off":
        return None
    if not text:
        return float_value("LOOPTRACE_SYSTEM_INTERVAL")
    low = float(setting("LOOPTRACE_SYSTEM_INTERVAL").low or 0.0)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= low or value == float("inf"):
        raise ConfigError(f"LOOPTRACE_SYSTEM_INTERVAL: `off` or seconds >= {low:g}, got {text!r}")
    return value


_CURRENT: list[Instrumented] = []  # what `instrument_from_environment()` made last


def current() -> Instrumented | None:
    """Return the instrumentation `looptrace run` (or the instrumentor) set up, else None.

    Under `looptrace run`, code that times sections of its own takes `current().lt` rather
    than configuring a second looptrace, so that its sections win over the patched calls'.
    """
    return _CURRENT[-1] if _CURRENT and _CURRENT[-1].active else None


def instrument_from_environment(
    lt: Looptrace | None = None, environ: Mapping[str, str] | None = None
) -> Instrumented:
    """Configure looptrace (unless `lt` is given) and instrument PyTorch as the environment says.

    Raises:
        ConfigError: a variable with a bad value.

    """
    environ = os.environ if environ is None else environ
    parts = parts_of(environ)
    reset_every = reset_every_of(environ)
    interval = system_interval_of(environ)
    if lt is None:
        from looptrace._configure import configure  # noqa: PLC0415 - loads the SDK

        lt = configure()
    from looptrace.integrations.torch import instrument  # noqa: PLC0415 - imports torch

    handle = instrument(
        lt,
        data="data" in parts,
        forward="forward" in parts,
        backward="backward" in parts,
        optimizer_step="optimizer" in parts,
        checkpoint="checkpoint" in parts,
        reset_every=reset_every,
    )
    if interval is not None:
        _sample(lt, handle, interval)
    _CURRENT[:] = [handle]
    return handle


def _sample(lt: Looptrace, handle: Instrumented, interval: float) -> None:
    """Sample the system figures until `uninstrument()`; without psutil, say so once."""
    from looptrace.integrations.system import sample_system  # noqa: PLC0415

    try:
        sampler = sample_system(lt, interval_s=interval)
    except ConfigError as error:
        logging.getLogger("looptrace").warning("no system figures: %s", error)
        return
    handle.at_uninstrument(sampler.stop)
