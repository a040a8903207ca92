"""A running count of one unit of one timer in one thread (`Timer.count`)."""

from __future__ import annotations


class Tally:
    """Units counted so far; compiled, the figures are machine floats: adding allocates nothing.

    `flops` is what the counts made with a `flops_per_unit` cost, and `priced` how many units
    those counts added: the rest of `total` costs what `configure(flops_per_unit=...)` says,
    if it says anything.
    """

    __slots__ = ("flops", "priced", "total")

    def __init__(self, total: float = 0.0, flops: float = 0.0, priced: float = 0.0) -> None:
        self.total = total
        self.flops = flops
        self.priced = priced

    def __repr__(self) -> str:
        return f"Tally({self.total!r}, flops={self.flops!r}, priced={self.priced!r})"
