"""The job's throughput, reduced in the cross-rank reduce's own collectives: no new one.

Each (timer path, unit) some rank counted (`Timer.count`) is a row of the agreed table
(`PathTable.units`), agreed exactly as a path is. Per row, each rank adds to the
collectives of `looptrace._distributed.collectives`:

1. to the MAX of extremes: its units per second and their negation, -inf where it did not
   count the unit (a rank that did not count it counts nowhere, never as 0);
2. to the SUM: its units, its units per second, and 1 where it counted them (0 elsewhere);
3. to the MAX of holders: its negated rank where it holds the lowest rate (the slowest
   rank), and again where it holds the highest, else -world (the lowest such rank on a tie).

`7` values (56 bytes) per row and window, whatever the world size.

A rank's rate is `Rate.per_s`, units per second of its window's wall time. A rank whose
window has no wall time (its rate undefined) does not take part for that unit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from looptrace._stats.rates import Rate
from looptrace._stats.spread import RateSpread

# (timer path, unit): a row of the throughput reduce.
Unit = tuple[str, str]
EXTREMES = 2
SUMS = 3
HOLDERS = 2
VALUES = EXTREMES + SUMS + HOLDERS


def counted(rates: Mapping[str, Mapping[str, Rate]]) -> list[Unit]:
    """Return the (path, unit) pairs of `rates` this rank takes part with (a defined rate)."""
    return [
        (path, unit)
        for path, units in rates.items()
        for unit, rate in units.items()
        if _known(rate) is not None
    ]


@dataclass(frozen=True, slots=True)
class Counted:
    """One rank's units and rates per agreed (path, unit) row (None: it did not count it)."""

    values: tuple[tuple[float, float] | None, ...]
    rank: int
    world: int

    @property
    def extremes_n(self) -> int:
        """Return how many values `extremes()` adds."""
        return EXTREMES * len(self.values)

    @property
    def sums_n(self) -> int:
        """Return how many values `sums()` adds."""
        return SUMS * len(self.values)

    @property
    def holders_n(self) -> int:
        """Return how many values `holders()` adds."""
        return HOLDERS * len(self.values)

    @classmethod
    def of(
        cls,
        rates: Mapping[str, Mapping[str, Rate]],
        units: Sequence[Unit],
        rank: int,
        world: int,
    ) -> Counted:
        """Return this rank's `(total, per_s)` of `rates` for each row of `units`."""
        values = []
        for path, unit in units:
            rate = rates.get(path, {}).get(unit)
            values.append(None if rate is None else _known(rate))
        return cls(tuple(values), rank, world)

    def extremes(self) -> list[float]:
        """Return the values this rank adds to the MAX: per row its rate, then negated."""
        highest = [-math.inf if v is None else v[1] for v in self.values]
        lowest = [-math.inf if v is None else -v[1] for v in self.values]
        return highest + lowest

    def sums(self) -> list[float]:
        """Return the values this rank adds to the SUM: units, rates, then 1 or 0, per row."""
        return (
            [0.0 if v is None else v[0] for v in self.values]
            + [0.0 if v is None else v[1] for v in self.values]
            + [0.0 if v is None else 1.0 for v in self.values]
        )

    def holders(self, extremes: Sequence[float]) -> list[float]:
        """Return the values this rank adds to the MAX of holders, from the reduced extremes.

        Per row its negated rank where it holds the lowest rate, then where it holds the
        highest; -world elsewhere.
        """
        n = len(self.values)
        nobody, mine = -float(self.world), -float(self.rank)
        slowest = [
            mine if v is not None and -v[1] == extremes[n + i] else nobody
            for i, v in enumerate(self.values)
        ]
        fastest = [
            mine if v is not None and v[1] == extremes[i] else nobody
            for i, v in enumerate(self.values)
        ]
        return slowest + fastest

    def present(self, sums: Sequence[float]) -> list[int]:
        """Return the rows some rank counted, from the reduced sums."""
        n = len(self.values)
        return [row for row in range(n) if sums[2 * n + row] > 0]

    def spreads(
        self,
        units: Sequence[Unit],
        extremes: Sequence[float],
        sums: Sequence[float],
        holders: Sequence[float],
    ) -> dict[str, dict[str, RateSpread]]:
        """Return `{path: {unit: RateSpread}}` of every row some rank counted."""
        n = len(self.values)
        found: dict[str, dict[str, RateSpread]] = {}
        for row in self.present(sums):
            path, unit = units[row]
            ranks = round(sums[2 * n + row])
            found.setdefault(path, {})[unit] = RateSpread(
                ranks=ranks,
                total=sums[row],
                per_s=sums[n + row],
                min=-extremes[n + row],
                max=extremes[row],
                mean=sums[n + row] / ranks,
                slowest_rank=-int(holders[row]),
                fastest_rank=-int(holders[n + row]),
            )
        return found


def _known(rate: Rate) -> tuple[float, float] | None:
    """Return `(total, per_s)` of `rate` where both are finite, else None."""
    total, per_s = float(rate.total), float(rate.per_s)
    return (total, per_s) if math.isfinite(total) and math.isfinite(per_s) else None
