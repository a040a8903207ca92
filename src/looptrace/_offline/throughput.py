"""The throughput and memory lines of `looptrace summary`, from snapshot files' windows."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

from looptrace._base.units import format_bytes
from looptrace._offline.text import escaped
from looptrace._offline.window_records import Window
from looptrace._stats.spread import RateSpread

_DEVICE_PEAKS = ("device_peak_allocated", "device_peak_reserved")
_DEVICE_COUNTS = (("device_alloc_retries", "allocator retries"), ("device_ooms", "OOMs"))


def throughput_lines(windows: Sequence[Window]) -> list[str]:
    """Return one line per (timer path, unit) counted: total, job rate, rate in lap time, MFU.

    A rank's rate is its units over its windows' wall time (lap time); the job's is the sum
    of its ranks' rates. Windows of `timer.reset()` and `lt.reset()` both count. The MFU is
    shown only where every window counted has one (the user gave the peak and the FLOPs): a
    rank's is its windows' MFU weighted by their wall time, the job's the mean of its ranks'.
    """
    totals: dict[tuple[str, str], dict[int, float]] = defaultdict(lambda: defaultdict(float))
    seconds: dict[tuple[str, str], dict[int, float]] = defaultdict(lambda: defaultdict(float))
    lap_s: dict[tuple[str, str], dict[int, float]] = defaultdict(lambda: defaultdict(float))
    # FLOP-seconds over peak by rank: the MFU weighted by wall time; None once a window lacks it
    used: dict[tuple[str, str], dict[int, float] | None] = {}
    for window in windows:
        for key, n in (window.counted or {}).items():
            totals[key][window.rank] += n
            seconds[key][window.rank] += window.seconds
            mfu = (window.mfu or {}).get(key)
            ranks = used.setdefault(key, defaultdict(float))
            if mfu is None or ranks is None:
                used[key] = None
            else:
                ranks[window.rank] += mfu * window.seconds
            stats = window.stats.get(key[0])
            if stats is not None:
                lap_s[key][window.rank] += stats.total
    lines = []
    for key in sorted(totals):
        path, unit = escaped(key[0]), escaped(key[1])
        total = sum(totals[key].values())
        per_s = _job_rate(totals[key], seconds[key])
        per_lap_s = _job_rate(totals[key], lap_s[key])
        lines.append(
            f"throughput {path} {unit}: {format_count(total)} in all, "
            f"{format_count(per_s)}/s of wall time, {format_count(per_lap_s)}/s of lap time"
            + (f" (sum of {len(totals[key])} ranks)" if len(totals[key]) > 1 else "")
            + _mfu_part(used.get(key), seconds[key])
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


def job_rate_lines(windows: Sequence[Window]) -> list[str]:
    """Return one line per (timer path, unit) of the windows reduced across ranks.

    Read from the lowest rank whose windows carry `rates_across_ranks` (every rank holds the
    same): the job's rate (the sum of the ranks' rates, weighted by each window's wall
    time), how many ranks counted, and the rank named slowest (least units per second) and
    fastest in most windows, each at its rates' mean in the windows that named it.
    """
    reduced = [w for w in windows if w.rates_spread]
    if not reduced:
        return []
    first = min(w.rank for w in reduced)
    found: dict[tuple[str, str], list[tuple[RateSpread, float]]] = defaultdict(list)
    for window in reduced:
        if window.rank == first:
            for key, spread in (window.rates_spread or {}).items():
                found[key].append((spread, window.seconds))
    lines = []
    for key, spreads in sorted(found.items()):
        path, unit = escaped(key[0]), escaped(key[1])
        slowest, slow_n, slow_at = _named(spreads, lambda s: (s.slowest_rank, s.min))
        fastest, _, fast_at = _named(spreads, lambda s: (s.fastest_rank, s.max))
        job = _weighted([(s.per_s, seconds) for s, seconds in spreads])
        ranks = max(s.ranks for s, _ in spreads)
        lines.append(
            f"throughput {path} {unit} across ranks: job {format_count(job)} {unit}/s "
            f"({ranks} {'rank' if ranks == 1 else 'ranks'}); slowest rank {slowest} at "
            f"{format_count(slow_at)}/s, fastest rank {fastest} at {format_count(fast_at)}/s"
            + (f" (slowest in {slow_n} of {len(spreads)} windows)" if len(spreads) > 1 else "")
        )
    return lines


def _named(
    spreads: Sequence[tuple[RateSpread, float]],
    figure: Callable[[RateSpread], tuple[int, float]],
) -> tuple[int, int, float]:
    """Return the rank named in most windows (the lowest on a tie), how often, its mean rate."""
    votes = Counter(figure(s)[0] for s, _ in spreads)
    rank = min(votes, key=lambda r: (-votes[r], r))
    rates = [(figure(s)[1], seconds) for s, seconds in spreads if figure(s)[0] == rank]
    return rank, votes[rank], _weighted(rates)


def _weighted(rates: Sequence[tuple[float, float]]) -> float:
    """Return the mean of `(rate, seconds)` weighted by the seconds (plain without any)."""
    known = [(rate, seconds) for rate, seconds in rates if not math.isnan(rate)]
    if not known:
        return math.nan
    seconds = sum(s for _, s in known)
    if seconds <= 0:
        return sum(rate for rate, _ in known) / len(known)
    return sum(rate * s for rate, s in known) / seconds


def memory_line(windows: Sequence[Window]) -> str | None:
    """Return the highest memory figures over the windows (any rank), host and device.

    None when no window measured memory (a metrics file, a timer's own windows).
    """
    worst: dict[str, int] = {}
    summed: dict[str, int] = defaultdict(int)
    for window in windows:
        for key, value in (window.memory or {}).items():
            worst[key] = max(worst.get(key, 0), value)
            summed[key] += value
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
