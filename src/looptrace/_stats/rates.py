"""Throughput: the units a timer counted in a window (`Timer.count`), as rates."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from looptrace._stats.tally import Tally

# The figures of a `Rate`, in the order `as_metrics()` writes them (`{unit}`, `{unit}_per_s`...).
RATE_STATS = ("total", "per_s", "per_lap_s", "per_lap", "mfu")


@dataclass(frozen=True, slots=True)
class Rate:
    """The units of one name (`"tokens"`) a timer counted in one window.

    `total` is the units counted; `per_s` per second of the window's wall time (what the
    job achieved, pauses included); `per_lap_s` per second of the timer's own time in the
    window (its laps, as `SectionStats.total`: the speed while it ran); `per_lap` per lap
    that ended in the window. A figure whose divisor is zero is NaN.

    `mfu` is the model FLOPs utilisation: the FLOPs of the units counted, per second of the
    window's wall time, over the device's peak FLOP/s. It is None (and left out of every
    output) unless the user gave both the peak (`configure(peak_flops=...)`) and the FLOPs
    of every unit counted in the window (`count(..., flops_per_unit=...)` or
    `configure(flops_per_unit=...)`): looptrace never guesses a peak from a device's name.
    """

    total: float
    per_s: float
    per_lap_s: float
    per_lap: float
    mfu: float | None = None

    def to_dict(self) -> dict[str, float]:
        """Return the figures as a plain dict (`mfu` only where it is known)."""
        data: dict[str, Any] = asdict(self)
        if self.mfu is None:
            del data["mfu"]
        return data


@dataclass(frozen=True, slots=True)
class Flops:
    """What MFU is computed from: the device's peak FLOP/s and the FLOPs per unit by name.

    Both come from the user (`configure(peak_flops=..., flops_per_unit=...)`); without a
    peak no rate has an MFU. A count's own `flops_per_unit` overrides `per_unit`.
    """

    peak: float | None = None
    per_unit: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))


def flops_setting(peak: object, per_unit: object) -> Flops:
    """Return the checked `Flops` of `configure()`'s arguments, or a `ValueError` saying why."""
    peak_flops = None if peak is None else _finite(peak)
    if peak is not None and (peak_flops is None or peak_flops <= 0):
        raise ValueError(
            f"peak_flops must be the device's peak FLOP/s, a finite number > 0, got {peak!r}"[:300]
        )
    if per_unit is None:
        per_unit = {}
    if not isinstance(per_unit, Mapping):
        raise ValueError(f"flops_per_unit must map unit names to FLOPs, got {per_unit!r}"[:300])
    checked: dict[str, float] = {}
    for unit, cost in per_unit.items():
        if not isinstance(unit, str) or not unit or "." in unit:
            raise ValueError(
                f"flops_per_unit: {unit!r} is not a unit name (a non-empty str without '.')"[:300]
            )
        flops = _finite(cost)
        if flops is None or flops < 0:
            raise ValueError(
                f"flops_per_unit[{unit!r}] must be a finite number >= 0, got {cost!r}"[:300]
            )
        checked[unit] = flops
    return Flops(peak_flops, MappingProxyType(checked))


def _finite(value: object) -> float | None:
    """Return `value` as a float if it is a finite real number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


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


def flops_of(
    parts: Iterable[Mapping[tuple[str, str], Tally]], per_unit: Mapping[str, float]
) -> dict[tuple[str, str], float]:
    """Return the FLOPs by (path, unit) where every unit counted has a cost, only there.

    Units counted with a `flops_per_unit` cost what the count said; the others what
    `per_unit` says for their name. A (path, unit) with units of no known cost is left out.
    """
    sums: dict[tuple[str, str], list[float]] = {}
    for part in parts:
        for key, tally in part.items():
            found = sums.get(key)
            if found is None:
                sums[key] = [tally.total, tally.priced, tally.flops]
            else:
                found[0] += tally.total
                found[1] += tally.priced
                found[2] += tally.flops
    flops: dict[tuple[str, str], float] = {}
    for key, (total, priced, cost) in sums.items():
        price = per_unit.get(key[1])
        if price is not None:
            flops[key] = cost + (total - priced) * price
        elif priced > 0 and total == priced:  # (each thread's sums are equal, so theirs are)
            flops[key] = cost
    return flops


def rates_of(
    totals: Mapping[str, Mapping[str, float]],
    times: Mapping[str, LapTime],
    window_s: float,
    flops: Mapping[tuple[str, str], float] | None = None,
    peak: float | None = None,
) -> Mapping[str, Mapping[str, Rate]]:
    """Return the read-only `{path: {unit: Rate}}` of a window `window_s` long.

    With a `peak` FLOP/s, a (path, unit) in `flops` (its FLOPs in the window) gets its MFU.
    """
    rates: dict[str, Mapping[str, Rate]] = {}
    costs = {} if flops is None or peak is None else flops
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
                    mfu=_mfu(costs.get((path, unit)), window_s, peak),
                )
                for unit, n in units.items()
            }
        )
    return MappingProxyType(rates)


def _mfu(flops: float | None, window_s: float, peak: float | None) -> float | None:
    """Return `flops` per second of `window_s` over `peak`; None when either is unknown."""
    if flops is None or peak is None:
        return None
    return _ratio(flops, window_s) / peak


def _ratio(n: float, divisor: float) -> float:
    """Return `n / divisor`, NaN when the divisor is not positive."""
    return n / divisor if divisor > 0 else math.nan
