"""A running count of one unit of one timer in one thread (`Timer.count`)."""

from __future__ import annotations


class Tally:
    """Units counted so far; compiled, `total` is a machine float: adding allocates nothing."""

    __slots__ = ("total",)

    def __init__(self, total: float = 0.0) -> None:
        self.total = total

    def __repr__(self) -> str:
        return f"Tally({self.total!r})"
