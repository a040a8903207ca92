"""One path's windows folded as they are read: `summary.merge_path`'s figures, in bounded memory.

`looptrace summary` of snapshot or metrics files adds each window's statistics of a path to
its rank's `PathFold` and drops the window. What `merge_path` sums (times, counts, each
window's count times its mean and its mean square), takes the least or largest of (min,
max) or adds up (errors, buckets) merges exactly: sums are kept as a few floats whose exact
sum is the exact sum of the values (`ExactSum`), so `math.fsum` gives the same result as
over the list; min and max keep the first value as Python's `min` over the list does. The
overall figures fold the ranks' folds (`merged`).

Quantiles of several windows are `mixture.mixture_quantiles` of their min, p50, p90, p99 and
max. A `QuantileFold` per path (all ranks) keeps up to `KEEP` windows that counted an
interval, in the order read: the same estimate, exactly. Past that it moves them and every
later one to a `SnappedMixture` (`snapped_mixture.py`): memory bounded by a fixed value grid,
each quantile within 0.034 % of the exact merge's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from looptrace._offline.mixture import mixture_quantiles
from looptrace._offline.snapped_mixture import SnappedMixture
from looptrace._stats.snapshot import SectionStats

KEEP = 32  # windows that counted an interval kept whole per path, for exact quantiles
_QUANTILES = (0.5, 0.9, 0.99)
_BUFFER = 16  # values or bucket rows gathered before they are folded into a few


class ExactSum:
    """Floats added up exactly: `value()` equals `math.fsum` of every value added."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        """Hold no value (`value()` is NaN: nothing known)."""
        self._parts: list[float] = []

    def add(self, value: float) -> None:
        """Add a value (NaN makes the sum NaN, as in `math.fsum`)."""
        parts = self._parts
        parts.append(value)
        if len(parts) > _BUFFER:
            self._parts = exact_parts(parts)

    @property
    def parts(self) -> list[float]:
        """Return floats whose exact sum is that of the values added."""
        return self._parts

    def __bool__(self) -> bool:
        """Whether any value was added."""
        return bool(self._parts)

    def value(self) -> float:
        """Return the correctly rounded sum (NaN when nothing was added)."""
        return math.fsum(self._parts) if self._parts else math.nan


def exact_parts(values: list[float]) -> list[float]:
    """Return a few floats whose exact sum is the exact sum of `values` (NaN: just NaN).

    Each round takes the correctly rounded sum of what is left (`math.fsum` of the values
    less the floats taken): the rest is smaller than half a unit in its last place, so a
    few rounds leave nothing.
    """
    taken: list[float] = []
    while True:
        rest = math.fsum(values + [-x for x in taken])
        if not math.isfinite(rest):
            return [rest]
        if rest == 0.0:
            return taken or [rest]  # (a sum of -0.0 stays -0.0)
        taken.append(rest)


class _Extreme:
    """The least (or largest) of values as Python's `min` (`max`) over them, NaN included.

    `min` keeps its first value when nothing compares below it: NaN first gives NaN, and a
    NaN later is never taken. So the first value and the least of the others tell it.
    """

    __slots__ = ("best", "first", "first_seq")

    def __init__(self) -> None:
        self.first_seq = -1  # the order of the first value (-1: none yet)
        self.first = math.nan
        self.best = math.nan  # the least (largest) value that is not NaN

    def add(self, seq: int, value: float, *, least: bool) -> None:
        if self.first_seq < 0:
            self.first_seq, self.first = seq, value
        best = self.best
        if not math.isnan(value) and (
            math.isnan(best) or (value < best if least else value > best)
        ):
            self.best = value


def _extreme(extremes: Sequence[_Extreme], *, least: bool) -> float:
    """Return the extreme over several folds, as `min` (`max`) over their values in order."""
    known = [e for e in extremes if e.first_seq >= 0]
    first = min(known, key=lambda e: e.first_seq)
    if math.isnan(first.first):
        return math.nan
    values = [e.best for e in known if not math.isnan(e.best)]
    return min(values) if least else max(values)


class _Buckets:
    """Bucket counts added up row by row; `()` once two rows differ in length."""

    __slots__ = ("_rows", "_width")

    def __init__(self) -> None:
        self._rows: list[tuple[int, ...]] = []
        self._width: int | None = None  # -1: rows of different lengths

    def add(self, row: tuple[int, ...]) -> None:
        if self._width is None:
            self._width = len(row)
        elif self._width != len(row):
            self._width = -1
        if self._width >= 0:
            self._rows.append(row)
            if len(self._rows) > _BUFFER:
                self._rows = [self.total()]

    def total(self) -> tuple[int, ...]:
        if self._width is None or self._width < 0:
            return ()
        return tuple(map(sum, zip(*self._rows, strict=True)))

    @staticmethod
    def merged(parts: Sequence[_Buckets]) -> tuple[int, ...]:
        widths = {p._width for p in parts if p._width is not None}
        if len(widths) != 1 or -1 in widths:
            return ()
        return tuple(map(sum, zip(*(row for p in parts for row in p._rows), strict=True)))


class PathFold:
    """One path's windows of one rank, folded: what `merge_path` needs of them, bounded."""

    __slots__ = (
        "buckets", "count", "ended", "errors", "first", "first_ended", "high", "idle_buckets",
        "low", "mean_sum", "parts", "self_time", "square_sum", "total",
    )  # fmt: skip

    def __init__(self) -> None:
        """Hold no window yet."""
        self.parts = 0  # windows with the path
        self.first: SectionStats | None = None
        self.total = ExactSum()  # of the known (not NaN) values
        self.self_time = ExactSum()
        self.errors = 0
        self.ended = 0  # windows where an interval of the path ended
        self.count = 0
        self.mean_sum = ExactSum()  # count * mean
        self.square_sum = ExactSum()  # count * (std**2 + mean**2)
        self.low = _Extreme()
        self.high = _Extreme()
        self.buckets = _Buckets()  # of the windows that counted an interval
        self.idle_buckets = _Buckets()  # of the others
        self.first_ended: SectionStats | None = None

    def add(self, seq: int, stats: SectionStats) -> None:
        """Fold one window's statistics of the path; `seq` orders the windows read."""
        self.parts += 1
        if self.first is None:
            self.first = stats
        if stats.total == stats.total:
            self.total.add(stats.total)
        if stats.self_time == stats.self_time:
            self.self_time.add(stats.self_time)
        self.errors += stats.errors
        count = stats.count
        if count <= 0:
            self.idle_buckets.add(stats.buckets)
            return
        self.ended += 1
        if self.first_ended is None:
            self.first_ended = stats
        self.count += count
        mean = stats.mean
        self.mean_sum.add(count * mean)
        self.square_sum.add(count * (stats.std**2 + mean**2))
        self.low.add(seq, stats.min, least=True)
        self.high.add(seq, stats.max, least=False)
        self.buckets.add(stats.buckets)


class QuantileFold:
    """One path's windows' distributions: kept whole up to `KEEP`, then snapped (bounded)."""

    __slots__ = ("kept", "snapped")

    def __init__(self) -> None:
        """Hold no window yet."""
        self.kept: list[SectionStats] = []  # the windows that counted an interval, up to KEEP
        self.snapped: SnappedMixture | None = None  # past KEEP: every such window's

    def add(self, stats: SectionStats) -> None:
        """Add one window's statistics of the path (one where no interval ended adds nothing)."""
        if stats.count <= 0:
            return
        if self.snapped is not None:
            self.snapped.add(stats)
            return
        self.kept.append(stats)
        if len(self.kept) > KEEP:
            self.snapped = SnappedMixture()
            for kept in self.kept:
                self.snapped.add(kept)
            self.kept = []

    def __len__(self) -> int:
        """Return the windows and grid values held (what bounds the memory)."""
        return len(self.kept) + (0 if self.snapped is None else len(self.snapped))

    def quantiles(self) -> list[float]:
        """Return p50, p90 and p99 of the windows: exact up to `KEEP`, else snapped."""
        if self.snapped is None:
            return mixture_quantiles(self.kept, _QUANTILES)
        return self.snapped.quantiles(_QUANTILES)


def merged(folds: Sequence[PathFold], quantiles: QuantileFold | None) -> SectionStats:
    """Return the statistics of the windows of several folds (ranks) of one path.

    `quantiles` holds the distributions of the same windows (None: p50, p90 and p99 NaN).
    """
    folds = [fold for fold in folds if fold.parts]
    parts = sum(fold.parts for fold in folds)
    if parts == 1:
        first = folds[0].first
        assert first is not None
        return first
    total = _sum([fold.total for fold in folds])
    self_time = _sum([fold.self_time for fold in folds])
    errors = sum(fold.errors for fold in folds)
    ended = [fold for fold in folds if fold.ended]
    if sum(fold.ended for fold in ended) == 1:
        only = ended[0].first_ended
        assert only is not None
        return dataclasses.replace(only, total=total, self_time=self_time, errors=errors)
    if not ended:
        buckets = _Buckets.merged([fold.idle_buckets for fold in folds])
        return SectionStats.empty(total=total, self_time=self_time, errors=errors, buckets=buckets)
    count = sum(fold.count for fold in ended)
    mean = _sum([fold.mean_sum for fold in ended]) / count
    square = _sum([fold.square_sum for fold in ended]) / count
    p50, p90, p99 = [math.nan] * 3 if quantiles is None else quantiles.quantiles()
    return SectionStats(
        count=count,
        total=total,
        mean=mean,
        min=_extreme([fold.low for fold in ended], least=True),
        max=_extreme([fold.high for fold in ended], least=False),
        std=math.sqrt(max(0.0, square - mean**2)),
        p50=p50,
        p90=p90,
        p99=p99,
        self_time=self_time,
        errors=errors,
        buckets=_Buckets.merged([fold.buckets for fold in ended]),
    )


def _sum(sums: Sequence[ExactSum]) -> float:
    """Return the exact sum over several folds' sums (NaN when none holds a value)."""
    parts = [value for part in sums for value in part.parts]
    return math.fsum(parts) if parts else math.nan
