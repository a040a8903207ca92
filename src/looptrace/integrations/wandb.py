"""Weights & Biases: a window's statistics as `/`-grouped keys on a step axis of their own.

`log_snapshot(snapshot)` logs `timing/<path>/<stat>` (the path's dots become `/`, so W&B groups
the charts per timer and section) together with `timing/step`, which `define_metric` makes
their x-axis: the timing charts follow looptrace's steps whatever else the run logs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import wandb

from looptrace._base.errors import ConfigError
from looptrace._stats.snapshot import SectionStats
from looptrace.integrations._common import DEFAULT_STATS, checked_stats, flat_metrics, step_of

__all__ = ["log_snapshot"]

# Runs whose step axis is defined, by id and prefix.
_defined: set[tuple[str, str]] = set()


def log_snapshot(
    snapshot: Mapping[str, SectionStats],
    *,
    step: int | None = None,
    run: Any = None,
    prefix: str = "timing",
    stats: Iterable[str] = DEFAULT_STATS,
) -> dict[str, float]:
    """Log a window's statistics to a W&B run and return what was logged.

    Args:
        snapshot: what `lt.reset()` returned.
        step: the value of `{prefix}/step` (default `snapshot.step`).
        run: the run (default `wandb.run`, the one `wandb.init()` started).
        prefix: the first part of every key, and of the step axis `{prefix}/step`.
        stats: the statistics logged per section.

    Raises:
        ConfigError: no run, no step, or an unknown statistic.

    """
    chosen = checked_stats(stats, "log_snapshot")
    run = run if run is not None else wandb.run
    if run is None:
        raise ConfigError("log_snapshot(): no W&B run; call wandb.init() first or pass run=")
    at = step_of(snapshot, step, "log_snapshot")
    axis = f"{prefix}/step"
    if (run.id, prefix) not in _defined:
        run.define_metric(axis)
        run.define_metric(f"{prefix}/*", step_metric=axis)
        _defined.add((run.id, prefix))
    values = flat_metrics(snapshot, prefix=prefix, stats_names=chosen, sep="/")
    run.log({**values, axis: at})
    return values
