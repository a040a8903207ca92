"""Throughput: the units a timer counted in a window (`Timer.count`), as rates."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Protocol

from looptrace._stats.tally import Tally

# The figures of a `Rate`, in the order `as_metrics()` writes them (`{unit}`, `{unit}_per_s`...).
RATE_STATS = ("total", "per_s", "per_lap_s", "per_lap")


@dataclass(frozen=True, slots=True)
class Rate:
    """The units of one name (`"tokens"`) a timer counted in one window.

    `total` is the units counted; `per_s` per second of the window's wall time (what the
    job achieved, pauses included); `per_lap_s` per second of the timer's own time in the
    window (its laps, as `SectionStats.total`: the speed while it ran); `per_lap` per lap
    that ended in the window. A figure whose divisor is zero is NaN.
    """

    total: float
    per_s: float
    per_lap_s: float
    per_lap: float

    def to_dict(self) -> dict[str, float]:
        """Return the figures as a plain dict."""
        return asdict(self)


class LapTime(Protocol):
    """What a rate divides by: a path's time and laps in the window (`SectionStats`)."""

    @property
    def total(self) -> float: ...

    @property
    def count(self) -> int: ...


def sum_counts(
    parts: Iterable[Mapping[tuple[str, str], Tally]],
) -> dict[str, dict[str, float]]:
    """Add threads' counts, by (path, unit), into `{path: {unit: total}}`, sorted."""
    totals: dict[tuple[str, str], float] = {}
    for part in parts:
        for key, tally in part.items():
            totals[key] = totals.get(key, 0.0) + tally.total
    grouped: dict[str, dict[str, float]] = {}
    for (path, unit), n in sorted(totals.items()):
        grouped.setdefault(path, {})[unit] = n
    return grouped


def rates_of(
    totals: Mapping[str, Mapping[str, float]],
    times: Mapping[str, LapTime],
    window_s: float,
) -> Mapping[str, Mapping[str, Rate]]:
    """Return the read-only `{path: {unit: Rate}}` of a window `window_s` long."""
    rates: dict[str, Mapping[str, Rate]] = {}
    for path, units in totals.items():
        time = times.get(path)
        lap_s = 0.0 if time is None else time.total
        laps = 0 if time is None else time.count
        rates[path] = MappingProxyType(
            {
                unit: Rate(
                    total=n,
                    per_s=_ratio(n, window_s),
                    per_lap_s=_ratio(n, lap_s),
                    per_lap=_ratio(n, laps),
                )
                for unit, n in units.items()
            }
        )
    return MappingProxyType(rates)


def _ratio(n: float, divisor: float) -> float:
    """Return `n / divisor`, NaN when the divisor is not positive."""
    return n / divisor if divisor > 0 else math.nan
