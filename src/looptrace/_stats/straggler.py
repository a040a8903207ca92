"""The rank that makes the others wait: each rank's own figures, the cause, the chronic count.

The straggler is the rank the others wait for, not the rank that waits: the rank with the
least time in wait sections (`Roles.wait`), or, where none is marked, the rank with the most
lap time outside them. Its excess is its lap time outside wait sections over the typical
rank's (the mean of the other ranks: a median would need every rank's figures, and the
cross-rank reduce moves the same bytes per rank whatever the world size). Its cause is the
section whose excess explains at least `straggler_cause` of that: the deepest such section,
so that a slow `forward.attention` is named rather than `forward`; otherwise "spread over
several sections", naming the largest. Plain data and plain Python: no torch.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from looptrace._stats.roles import Roles

if TYPE_CHECKING:
    from looptrace._stats.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class RankFigures:
    """One rank's lap time in a window, split into time in wait sections and outside them.

    Attributes:
        laps: the lap paths (the outermost paths of the window; their totals are lap time).
        lap_s: seconds of lap time.
        wait_s: seconds in wait sections inside the laps (nested wait sections count once).
        waits: whether this rank ran a wait section in the window.

    """

    laps: tuple[str, ...]
    lap_s: float
    wait_s: float
    waits: bool

    @property
    def outside_s(self) -> float:
        """Lap time outside wait sections."""
        return self.lap_s - self.wait_s

    @classmethod
    def of(cls, snapshot: Snapshot, roles: Roles) -> RankFigures:
        """Return the figures of `snapshot` under `roles`."""
        paths = list(snapshot)
        laps = lap_paths(paths)
        lap_s = sum(snapshot[p].total for p in laps)
        wait = [p for p in paths if roles.of(p) == "wait" and _under_any(p, laps)]
        outer = [p for p in wait if not _under_any(p, wait, strict=True)]
        return cls(tuple(laps), lap_s, sum(snapshot[p].total for p in outer), bool(wait))


def lap_paths(paths: list[str]) -> list[str]:
    """Return the outermost of `paths`: those with no ancestor among them."""
    present = set(paths)
    return [p for p in paths if not any(a in present for a in _ancestors(p))]


def _ancestors(path: str) -> list[str]:
    levels = path.split(".")
    return [".".join(levels[:i]) for i in range(1, len(levels))]


def _under_any(path: str, parents: list[str], *, strict: bool = False) -> bool:
    return any((path == p and not strict) or path.startswith(f"{p}.") for p in parents)


@dataclass(frozen=True, slots=True)
class Straggler:
    """The window's straggler across ranks, its excess and its cause; plain data.

    Attributes:
        rank: the straggler (the lowest rank on a tie).
        by: `"wait"` (the least time in wait sections) or `"outside_wait"` (the most lap time
            outside wait sections: no rank ran a wait section).
        excess_s: its lap time outside wait sections over the typical rank's, in seconds.
        typical_s: the typical rank's lap time outside wait sections (mean of the others).
        cause: the path whose excess explains at least `straggler_cause` of `excess_s`;
            None when the excess is spread (then `spread_over` names the largest parts).
        spread_over: the paths with the largest excess, largest first, when `cause` is None.
        excess_by_path: each section's excess over the typical rank (non-wait sections).
        chronic_rank: a rank named straggler in at least `chronic_count` of the last
            `chronic_windows` windows (counted by each rank for itself), or None.
        chronic_count: how many of those windows `chronic_rank` was the straggler in.
        streak: how many windows in a row, this one last, named this rank the straggler
            with an effect (`Straggler.effective`); 0 when this window's effect is too small.

    """

    rank: int
    by: str
    excess_s: float
    typical_s: float
    cause: str | None
    spread_over: tuple[str, ...] = ()
    excess_by_path: Mapping[str, float] = field(default_factory=dict)
    chronic_rank: int | None = None
    chronic_count: int = 0
    streak: int = 0

    @property
    def share(self) -> float:
        """The excess as a share of the typical rank's lap time outside wait sections."""
        return self.excess_s / self.typical_s if self.typical_s > 0 else 0.0

    def effective(self, steps: int, limits: Mapping[str, float]) -> bool:
        """Whether the excess is an effect, not noise: a share of the lap and time per step.

        At least `straggler_warning` of the typical rank's lap time outside wait sections,
        and at least `straggler_min_excess_s` per step of the window's `steps`.
        """
        return (
            self.share >= limits["straggler_warning"]
            and self.excess_s / max(1, steps) >= limits["straggler_min_excess_s"]
        )

    def to_dict(self) -> dict[str, object]:
        """Return the straggler as plain data."""
        return {
            "rank": self.rank,
            "by": self.by,
            "excess_s": self.excess_s,
            "typical_s": self.typical_s,
            "cause": self.cause,
            "spread_over": list(self.spread_over),
            "excess_by_path": dict(self.excess_by_path),
            "chronic_rank": self.chronic_rank,
            "chronic_count": self.chronic_count,
            "streak": self.streak,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Straggler:
        """Return the straggler that `to_dict()` gave."""
        excess = data.get("excess_by_path") or {}
        chronic = data.get("chronic_rank")
        return cls(
            rank=int(data["rank"]),  # type: ignore[call-overload]
            by=str(data["by"]),
            excess_s=float(data["excess_s"]),  # type: ignore[arg-type]
            typical_s=float(data["typical_s"]),  # type: ignore[arg-type]
            cause=None if data.get("cause") is None else str(data["cause"]),
            spread_over=tuple(str(p) for p in data.get("spread_over") or ()),  # type: ignore[attr-defined]
            excess_by_path=MappingProxyType({str(k): float(v) for k, v in excess.items()}),  # type: ignore[attr-defined]
            chronic_rank=None if chronic is None else int(chronic),  # type: ignore[call-overload]
            chronic_count=int(data.get("chronic_count") or 0),  # type: ignore[call-overload]
            streak=int(data.get("streak") or 0),  # type: ignore[call-overload]
        )


def cause_of(
    excess_by_path: Mapping[str, float], excess_s: float, share: float, laps: list[str]
) -> tuple[str | None, tuple[str, ...]]:
    """Return (cause, spread_over) of an excess of `excess_s` seconds split over sections.

    The cause is the deepest section whose excess is at least `share` of `excess_s` (the
    largest excess among equally deep ones); without one, `spread_over` names the direct
    children of the laps with a positive excess, largest first, at most three.
    """
    if excess_s <= 0:
        return None, ()
    explaining = [p for p, e in excess_by_path.items() if e >= share * excess_s]
    if explaining:
        return max(explaining, key=lambda p: (p.count("."), excess_by_path[p])), ()
    tops = [
        p
        for p, e in excess_by_path.items()
        if e > 0 and any(p.rpartition(".")[0] == lap for lap in laps)
    ]
    return None, tuple(sorted(tops, key=lambda p: -excess_by_path[p])[:3])


def straggler_metrics(
    straggler: Straggler | None, head: str, sep: str, levels: Callable[[str], str]
) -> dict[str, float]:
    """Return the flat metrics of a window's straggler (see `Snapshot.as_metrics`).

    None where the window names no straggler: no cross-rank window, or no wait section known.
    """
    if straggler is None or straggler.by != "wait":
        return {}
    name = f"{head}straggler{sep}"
    flat = {
        f"{name}rank": float(straggler.rank),
        f"{name}excess_s": straggler.excess_s,
        f"{name}share": straggler.share,
        f"{name}streak": float(straggler.streak),
    }
    if straggler.chronic_rank is not None:
        flat[f"{name}chronic_rank"] = float(straggler.chronic_rank)
        flat[f"{name}chronic_count"] = float(straggler.chronic_count)
    if straggler.cause is not None:
        flat[f"{head}{levels(straggler.cause)}{sep}straggler_excess_s"] = (
            straggler.excess_by_path.get(straggler.cause, straggler.excess_s)
        )
    return flat


def window_steps(snapshot: Snapshot) -> int:
    """Return the laps a window's outermost timers completed: its steps, at least 1."""
    paths = list(snapshot)
    return max(1, sum(snapshot[p].count for p in lap_paths(paths)))


class StragglerStreaks:
    """The rank each subtree's recent windows named the straggler with an effect, and how often.

    Every rank computes the same `Straggler` from the same reduced values, so every rank
    keeps the same streaks without a value more in the reduce.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, int]] = {}

    def count(self, subtree: str, rank: int | None) -> int:
        """Count a window that named `rank` with an effect (None: none); return its streak."""
        if rank is None:
            self._last.pop(subtree, None)
            return 0
        last, streak = self._last.get(subtree, (rank, 0))
        streak = streak + 1 if last == rank else 1
        self._last[subtree] = (rank, streak)
        return streak


class StragglerCount:
    """How many of this rank's last windows named it the straggler, per subtree."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[str, collections.deque[bool]] = {}

    def count_with(self, subtree: str, straggler: bool, windows: int) -> int:
        """Count this window (`straggler` or not) and return the count over the last `windows`."""
        count = self.preview(subtree, straggler, windows)
        seen = self._seen.get(subtree)
        if seen is None or seen.maxlen != windows:
            seen = self._seen[subtree] = collections.deque(seen or (), maxlen=windows)
        seen.append(straggler)
        return count

    def preview(self, subtree: str, straggler: bool, windows: int) -> int:
        """Return what `count_with` would, counting nothing (a reduce may still fail)."""
        seen = list(self._seen.get(subtree, ()))[-(windows - 1) :] if windows > 1 else []
        return sum(seen) + straggler
