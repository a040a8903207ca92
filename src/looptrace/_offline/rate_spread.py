"""The `rates_across_ranks` of a snapshot line, read back as `RateSpread`s, checked."""

from __future__ import annotations

import math

from looptrace._stats.spread import RateSpread

_RATES = ("total", "per_s", "min", "max", "mean")
_RANKS = ("ranks", "slowest_rank", "fastest_rank")


def rate_spreads(value: object) -> dict[tuple[str, str], RateSpread] | None:
    """Return the `rates_across_ranks` object by (path, unit); None where the line has none.

    Raises:
        TypeError: the object or one of its figures is not what looptrace writes.
        ValueError: a figure out of range (a negative rate, a rank that is not whole).

    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("rates_across_ranks is not an object")
    found: dict[tuple[str, str], RateSpread] = {}
    for path, units in value.items():
        if not isinstance(units, dict):
            raise TypeError(f"rates_across_ranks of {path!r} is not an object")
        for unit, spread in units.items():
            if not isinstance(spread, dict):
                raise TypeError(f"rates_across_ranks of {unit!r} of {path!r} is not an object")
            total, per_s, low, high, mean = (_rate(spread.get(n), n) for n in _RATES)
            ranks, slowest, fastest = (_whole(spread.get(n), n) for n in _RANKS)
            found[str(path), str(unit)] = RateSpread(
                ranks=ranks,
                total=total,
                per_s=per_s,
                min=low,
                max=high,
                mean=mean,
                slowest_rank=slowest,
                fastest_rank=fastest,
            )
    return found


def _rate(value: object, name: str) -> float:
    """Return a count or a rate: a number >= 0 (None, as JSON writes NaN: undefined)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"rates_across_ranks {name} is not a number")
    number = float(value)
    if not number >= 0 and not math.isnan(number):
        raise ValueError(f"rates_across_ranks {name} is below 0")
    return number


def _whole(value: object, name: str) -> int:
    """Return a rank or a number of ranks: a whole number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"rates_across_ranks {name} is not a number")
    if not (0 <= value < 2**63 and float(value).is_integer()):
        raise ValueError(f"rates_across_ranks {name} is not a whole number >= 0")
    return int(value)
