"""The bounds of `looptrace report`'s page: what it keeps of a large job, and how it says so.

The page's size is bounded by these constants, not by ranks × windows × spans. Each part
keeps what matters most up to its bound (the slow and occasional laps, the slowest steps, the
ranks with the highest and lowest means, which include a straggler) and the page says what it
left out. Below every bound the page shows everything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

MAX_WATERFALL_SPANS = 10_000  # spans of all waterfalls together (about 240 bytes of page each)
MAX_STEP_SPANS = 2_000  # spans of one waterfall: beyond, the step's longest
MAX_TIMELINE_RANKS = 32  # ranks drawn on the step timeline
MAX_MARKS = 1_000  # slow and occasional laps marked on the timeline
EXTREME_RANKS = 8  # of a bounded set of ranks: as many with the highest and the lowest mean
MAX_SHARE_BARS = 60  # bars of the share chart; beyond, consecutive windows (steps) share one
MAX_SYSTEM_RANKS = 32  # rows of each figure in the System table
MAX_SYSTEM_SERIES = 16  # lines of a System chart
EXTREME_SERIES = 4  # of a bounded chart: as many lines with the highest and the lowest mean
MAX_SYSTEM_POINTS = 4_000  # points of a System chart: beyond, the min and max per bucket

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Kept(Generic[K]):
    """The keys a bounded part keeps, in their first order, and the page's note ("": all)."""

    keys: list[K]
    note: str


def extremes_first(
    means: Mapping[K, float],
    limit: int,
    extremes: int,
    name: Callable[[K], str],
    what: str,
) -> Kept[K]:
    """Keep every key (`limit` or fewer), else those with the extreme means and the first ones.

    Beyond `limit`: the `extremes` keys with the highest mean and as many with the lowest
    (ties: the first), then the first keys in the mapping's order until `limit` are kept. The
    note names them: "32 of 1,024 ranks: rank 0 to rank 15, and the 8 with the highest and the
    8 with the lowest mean lap". `name` names one key, `what` the mean.
    """
    order = list(means)
    if len(order) <= limit:
        return Kept(order, "")
    place = {key: index for index, key in enumerate(order)}

    def value(key: K) -> float:
        mean = means[key]
        return -math.inf if math.isnan(mean) else mean

    highest = sorted(order, key=lambda k: (-value(k), place[k]))[:extremes]
    lowest = sorted(order, key=lambda k: (value(k), place[k]))[:extremes]
    chosen = set(highest) | set(lowest)
    last: K | None = None
    for key in order:
        if len(chosen) >= limit:
            break
        if key not in chosen:
            chosen.add(key)
            last = key
    first = "" if last is None else f"{name(order[0])} to {name(last)}, and "
    note = (
        f"{len(chosen):,} of {len(order):,}: {first}the {extremes} with the highest and the "
        f"{extremes} with the lowest {what}"
    )
    return Kept([key for key in order if key in chosen], note)


def thinned(points: Sequence[tuple[int, float]], budget: int) -> list[tuple[int, float]]:
    """Return `(step, value)` points: all of them, or the min and max of each bucket of steps."""
    if len(points) <= budget:
        return list(points)
    buckets = max(1, budget // 2)
    size = math.ceil(len(points) / buckets)
    kept: list[tuple[int, float]] = []
    for start in range(0, len(points), size):
        chunk = points[start : start + size]
        low = min(chunk, key=lambda p: p[1])
        high = max(chunk, key=lambda p: p[1])
        kept += sorted({low, high})
    return kept


def spread_order(items: Sequence[K]) -> list[K]:
    """Return `items` so that any first part of the list is spread evenly over all of them.

    The first, the middle, the quarters, the eighths, ...: cutting the list short after any
    item keeps items from the whole range, not only its start.
    """
    count = len(items)
    if count < 3:
        return list(items)
    bits = (count - 1).bit_length()

    def reversed_bits(index: int) -> int:
        return int(f"{index:0{bits}b}"[::-1], 2)

    return [items[index] for index in sorted(range(count), key=reversed_bits)]
