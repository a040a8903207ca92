"""Throughput as plain data and flat metrics: `Snapshot.rates` and `rates_across_ranks`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from looptrace._stats.rates import RATE_STATS, Rate
from looptrace._stats.spread import RateSpread


def rate_metric_names(unit: str) -> tuple[str, ...]:
    """Return the metric names of a unit's `RATE_STATS`: `tokens`, `tokens_per_s`, ..."""
    return (unit, f"{unit}_per_s", f"{unit}_per_lap_s", f"{unit}_per_lap", f"{unit}_mfu")


def rate_metrics(
    rates: Mapping[str, Mapping[str, Rate]], head: str, sep: str, levels: Callable[[str], str]
) -> dict[str, float]:
    """Return the flat metrics of `rates` as `as_metrics()` names them (NaN left out)."""
    flat: dict[str, float] = {}
    for path, units in rates.items():
        name = f"{head}{levels(path)}"
        for unit, rate in units.items():
            for stat, metric in zip(RATE_STATS, rate_metric_names(levels(unit)), strict=True):
                figure = getattr(rate, stat)
                if figure is not None and not math.isnan(figure):
                    flat[f"{name}{sep}{metric}"] = figure
    return flat


def rate_spread_metrics(
    spreads: Mapping[str, Mapping[str, RateSpread]],
    head: str,
    sep: str,
    levels: Callable[[str], str],
) -> dict[str, float]:
    """Return the flat metrics of the units counted across ranks (`RateSpread.metrics`)."""
    flat: dict[str, float] = {}
    for path, units in spreads.items():
        name = f"{head}{levels(path)}"
        for unit, spread in units.items():
            total, rate = rate_metric_names(levels(unit))[:2]
            for key, value in spread.metrics(total, rate, sep).items():
                flat[f"{name}{sep}{key}"] = value
    return flat


def rates_dict(
    rates: Mapping[str, Mapping[str, Rate | RateSpread]],
) -> dict[str, dict[str, Any]]:
    """Return `{path: {unit: {total, per_s, per_lap_s, per_lap[, mfu]}}}` as plain data.

    Also for `RateSpread`s: `{path: {unit: RateSpread as a dict}}`.
    """
    return {
        path: {unit: rate.to_dict() for unit, rate in units.items()}
        for path, units in rates.items()
    }
