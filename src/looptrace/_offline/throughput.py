"""The throughput and memory lines of `looptrace summary`, from snapshot files' windows."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from looptrace._base.units import format_bytes
from looptrace._offline.text import escaped
from looptrace._offline.window_records import Window
from looptrace._stats.spread import RateSpread

_DEVICE_PEAKS = ("device_peak_allocated", "device_peak_reserved")
_DEVICE_COUNTS = (("device_alloc_retries", "allocator retries"), ("device_ooms", "OOMs"))


def throughput_lines(windows: Iterable[Window]) -> list[str]:
    """Return one line per (timer path, unit) counted: total, job rate, rate in lap time, MFU.

    A rank's rate is its units over its windows' wall time (lap time); the job's is the sum
    of its ranks' rates. Windows of `timer.reset()` and `lt.reset()` both count. The MFU is
    shown only where every window counted has one (the user gave the peak and the FLOPs): a
    rank's is its windows' MFU weighted by their wall time, the job's the mean of its ranks'.
    """
    fold = ThroughputFold()
    for window in windows:
        fold.add(window)
    return fold.lines()


class ThroughputFold:
    """`throughput_lines` window by window: per (path, unit) and rank, its sums."""

    def __init__(self) -> None:
        """Hold no window yet."""
        self.totals: dict[tuple[str, str], dict[int, float]] = defaultdict(
            lambda: defaultdict(float)
        )
        self.seconds: dict[tuple[str, str], dict[int, float]] = defaultdict(
            lambda: defaultdict(float)
        )
        self.lap_s: dict[tuple[str, str], dict[int, float]] = defaultdict(
            lambda: defaultdict(float)
        )
        # FLOP-seconds over peak by rank: the MFU weighted by wall time; None once one lacks it
        self.used: dict[tuple[str, str], dict[int, float] | None] = {}

    def add(self, window: Window) -> None:
        """Add one window's counted units."""
        for key, n in (window.counted or {}).items():
            self.totals[key][window.rank] += n
            self.seconds[key][window.rank] += window.seconds
            mfu = (window.mfu or {}).get(key)
            ranks = self.used.setdefault(key, defaultdict(float))
            if mfu is None or ranks is None:
                self.used[key] = None
            else:
                ranks[window.rank] += mfu * window.seconds
            stats = window.stats.get(key[0])
            if stats is not None:
                self.lap_s[key][window.rank] += stats.total

    def lines(self) -> list[str]:
        """Return the lines of the windows added."""
        lines = []
        for key in sorted(self.totals):
            path, unit = escaped(key[0]), escaped(key[1])
            totals = self.totals[key]
            total = sum(totals.values())
            per_s = _job_rate(totals, self.seconds[key])
            per_lap_s = _job_rate(totals, self.lap_s[key])
            lines.append(
                f"throughput {path} {unit}: {format_count(total)} in all, "
                f"{format_count(per_s)}/s of wall time, {format_count(per_lap_s)}/s of lap time"
                + (f" (sum of {len(totals)} ranks)" if len(totals) > 1 else "")
                + _mfu_part(self.used.get(key), self.seconds[key])
            )
        return lines


def job_rates(windows: Sequence[Window], path: str) -> dict[str, float]:
    """Return `{unit: the job's units per second of wall time}` that timer `path` counted."""
    totals: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    seconds: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for window in windows:
        for (counted_path, unit), n in (window.counted or {}).items():
            if counted_path == path:
                totals[unit][window.rank] += n
                seconds[unit][window.rank] += window.seconds
    return {unit: _job_rate(totals[unit], seconds[unit]) for unit in sorted(totals)}


def peak_memory(windows: Sequence[Window]) -> tuple[str, str] | None:
    """Return (size, what) of the run's peak memory: the device's if measured, else the host's."""
    worst: dict[str, int] = {}
    for window in windows:
        for key, value in (window.memory or {}).items():
            worst[key] = max(worst.get(key, 0), value)
    for key, what in (("device_peak_allocated", "device peak"), ("host_peak_rss", "host peak")):
        if key in worst:
            return format_bytes(worst[key]), what
    return None


def job_rate_lines(windows: Iterable[Window]) -> list[str]:
    """Return one line per (timer path, unit) of the windows reduced across ranks.

    Read from the lowest rank whose windows carry `rates_across_ranks` (every rank holds the
    same): the job's rate (the sum of the ranks' rates, weighted by each window's wall
    time), how many ranks counted, and the rank named slowest (least units per second) and
    fastest in most windows, each at its rates' mean in the windows that named it.
    """
    fold = JobRateFold()
    for window in windows:
        fold.add(window)
    return fold.lines()


class _Weighted:
    """A mean of rates weighted by seconds, rate by rate (plain where no seconds counted)."""

    __slots__ = ("known", "rates", "seconds", "weighted")

    def __init__(self) -> None:
        self.known = 0
        self.rates: float = 0
        self.weighted: float = 0
        self.seconds: float = 0

    def add(self, rate: float, seconds: float) -> None:
        if math.isnan(rate):
            return
        self.known += 1
        self.rates += rate
        self.weighted += rate * seconds
        self.seconds += seconds

    def mean(self) -> float:
        if not self.known:
            return math.nan
        if self.seconds <= 0:
            return self.rates / self.known
        return self.weighted / self.seconds


class _Named:
    """Per rank named (slowest, or fastest), in how many windows and at what mean rate."""

    def __init__(self) -> None:
        self.votes: Counter[int] = Counter()
        self.rates: dict[int, _Weighted] = defaultdict(_Weighted)

    def add(self, rank: int, rate: float, seconds: float) -> None:
        self.votes[rank] += 1
        self.rates[rank].add(rate, seconds)

    def most(self) -> tuple[int, int, float]:
        """Return the rank named in most windows (the lowest on a tie), how often, its rate."""
        votes = self.votes
        rank = min(votes, key=lambda r: (-votes[r], r))
        return rank, votes[rank], self.rates[rank].mean()


class _KeyRates:
    """The windows' `rates_across_ranks` of one (path, unit), folded."""

    def __init__(self) -> None:
        self.windows = 0
        self.ranks = 0
        self.job = _Weighted()
        self.slowest = _Named()
        self.fastest = _Named()

    def add(self, spread: RateSpread, seconds: float) -> None:
        self.windows += 1
        self.ranks = spread.ranks if self.windows == 1 else max(self.ranks, spread.ranks)
        self.job.add(spread.per_s, seconds)
        self.slowest.add(spread.slowest_rank, spread.min, seconds)
        self.fastest.add(spread.fastest_rank, spread.max, seconds)


class JobRateFold:
    """`job_rate_lines` window by window: the lowest rank's reduced rates, folded."""

    def __init__(self) -> None:
        """Hold no window yet."""
        self.rank: int | None = None  # the lowest rank with `rates_across_ranks` so far
        self.found: dict[tuple[str, str], _KeyRates] = {}

    def add(self, window: Window) -> None:
        """Add one window's `rates_across_ranks` (those of a lower rank start afresh)."""
        if not window.rates_spread:
            return
        if self.rank is None or window.rank < self.rank:
            self.rank, self.found = window.rank, {}
        if window.rank != self.rank:
            return
        for key, spread in window.rates_spread.items():
            self.found.setdefault(key, _KeyRates()).add(spread, window.seconds)

    def lines(self) -> list[str]:
        """Return the lines of the windows added."""
        lines = []
        for key, rates in sorted(self.found.items()):
            path, unit = escaped(key[0]), escaped(key[1])
            slowest, slow_n, slow_at = rates.slowest.most()
            fastest, _, fast_at = rates.fastest.most()
            job, ranks = rates.job.mean(), rates.ranks
            lines.append(
                f"throughput {path} {unit} across ranks: job {format_count(job)} {unit}/s "
                f"({ranks} {'rank' if ranks == 1 else 'ranks'}); slowest rank {slowest} at "
                f"{format_count(slow_at)}/s, fastest rank {fastest} at {format_count(fast_at)}/s"
                + (
                    f" (slowest in {slow_n} of {rates.windows} windows)"
                    if rates.windows > 1
                    else ""
                )
            )
        return lines


def memory_line(windows: Iterable[Window]) -> str | None:
    """Return the highest memory figures over the windows (any rank), host and device.

    None when no window measured memory (a metrics file, a timer's own windows).
    """
    fold = MemoryFold()
    for window in windows:
        fold.add(window)
    return fold.line()


class MemoryFold:
    """`memory_line` window by window: the highest of each figure, and the counts' sums."""

    def __init__(self) -> None:
        """Hold no window yet."""
        self.worst: dict[str, int] = {}
        self.summed: dict[str, int] = defaultdict(int)

    def add(self, window: Window) -> None:
        """Add one window's memory figures."""
        for key, value in (window.memory or {}).items():
            self.worst[key] = max(self.worst.get(key, 0), value)
            self.summed[key] += value

    def line(self) -> str | None:
        """Return the memory line of the windows added (None: none measured memory)."""
        worst, summed = self.worst, self.summed
        parts = []
        if "host_peak_rss" in worst:
            parts.append(f"host peak resident {format_bytes(worst['host_peak_rss'])}")
        for key in _DEVICE_PEAKS:
            if key in worst:
                parts.append(f"{key.replace('_', ' ')} {format_bytes(worst[key])}")
        for key, name in _DEVICE_COUNTS:
            if key in summed:
                parts.append(f"{name} {summed[key]}")
        return "memory: " + ", ".join(parts) if parts else None


def _mfu_part(used: dict[int, float] | None, seconds: dict[int, float]) -> str:
    """Return `, MFU 41.2 %` (the mean over ranks of each rank's MFU), or "" if not known."""
    if not used:
        return ""
    ranks = [used[rank] / seconds[rank] for rank in used if seconds.get(rank, 0.0) > 0]
    if not ranks:
        return ""
    return f", MFU {100 * sum(ranks) / len(ranks):.1f} %" + (
        f" (mean of {len(ranks)} ranks)" if len(ranks) > 1 else ""
    )


def _job_rate(totals: dict[int, float], seconds: dict[int, float]) -> float:
    """Return the sum over ranks of each rank's units per second (NaN: no time at all)."""
    rates = [n / seconds[rank] for rank, n in totals.items() if seconds.get(rank, 0.0) > 0]
    return sum(rates) if rates else float("nan")


def format_count(value: float) -> str:
    """Return a count or rate with thousands separators and at most one decimal."""
    if math.isnan(value):
        return "-"
    return f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.1f}"
