"""A diagnosis in words: findings from one window's snapshot (and its cross-rank spread).

A pure function of what a snapshot holds, the roles of its sections and the thresholds
(`looptrace._stats.thresholds`): the snapshot, the snapshot file's reader and `looptrace
summary` share it. Each check either finds something (a warning or worse when a threshold
is crossed), says nothing (healthy), or abstains with an `info` finding naming the missing
input ("no `data` section: input wait not measured"); it never guesses a role.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from looptrace._stats.roles import Roles
from looptrace._stats.straggler import lap_paths

if TYPE_CHECKING:
    from looptrace._stats.snapshot import Snapshot

SEVERITIES = ("critical", "warning", "info")
KINDS = (
    "input_bound",
    "outside_laps",
    "self_time",
    "straggler",
    "chronic_straggler",
    "slow_steps",
    "memory_creep",
    "memory_pressure",
    "throughput_drop",
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One answer: what kind, how bad, where, in one line with its numbers, and what to try.

    `evidence` holds the figures used; `evidence["abstained"]` is True for an `info`
    finding that only says which input is missing.
    """

    kind: str
    severity: str
    path: str | None
    rank: int | None
    message: str
    action: str
    evidence: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """Return the finding as plain data."""
        return {
            "kind": self.kind,
            "severity": self.severity,
            "path": self.path,
            "rank": self.rank,
            "message": self.message,
            "action": self.action,
            "evidence": dict(self.evidence),
        }


def ranked(findings: list[Finding]) -> list[Finding]:
    """Return `findings` most severe first (stable within a severity)."""
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


def _level(share: float, limits: Mapping[str, float], kind: str) -> str | None:
    if share >= limits[f"{kind}_critical"]:
        return "critical"
    if share >= limits[f"{kind}_warning"]:
        return "warning"
    return None


def _abstain(kind: str, why: str) -> Finding:
    return Finding(kind, "info", None, None, why, "", {"abstained": True})


def diagnose(snapshot: Snapshot, roles: Roles, limits: Mapping[str, float]) -> list[Finding]:
    """Return the findings of one window, most severe first."""
    findings: list[Finding] = []
    paths = [p for p in snapshot if snapshot[p].count > 0 or snapshot[p].total > 0]
    laps = [p for p in lap_paths(paths) if snapshot[p].count > 0]
    for check in _CHECKS:
        findings.extend(check(snapshot, laps, roles, limits))
    return ranked(findings)


def _typical_total(snapshot: Snapshot, path: str) -> float:
    """Return the path's total on the typical rank: the mean over ranks, else this rank's."""
    spread = None if snapshot.across_ranks is None else snapshot.across_ranks.get(path)
    return snapshot[path].total if spread is None else spread.total.mean


def _input_bound(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    found = [
        (lap, p)
        for lap in laps
        for p in snapshot
        if p.startswith(f"{lap}.") and p.count(".") == lap.count(".") + 1 and roles.of(p) == "data"
    ]
    if not found:
        names = ", ".join(f"`{n}`" for n in sorted(roles.data)) or "data"
        return [_abstain("input_bound", f"no {names} section: input wait not measured")]
    out = []
    for lap, path in found:
        lap_s = _typical_total(snapshot, lap)
        data_s = _typical_total(snapshot, path)
        share = data_s / lap_s if lap_s > 0 else 0.0
        level = _level(share, limits, "input_bound")
        if level is not None:
            who = "the typical rank's" if snapshot.across_ranks is not None else "the"
            out.append(
                Finding(
                    "input_bound",
                    level,
                    path,
                    None,
                    f"{share:.0%} of {who} {lap} lap waits for input in {path} "
                    f"({data_s:.3f} s of {lap_s:.3f} s)",
                    "more DataLoader workers, pin_memory, prefetching, or lighter transforms",
                    {"share": share, "data_s": data_s, "lap_s": lap_s, "lap": lap},
                )
            )
    return out


def _outside_laps(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    """Time in other timers, and in evaluation or checkpoint sections, of the window's wall time.

    The main loop is the lap path with the most time. Time in no timer at all is not
    counted: a window of `timer.reset()` spans time its timer never ran, which says nothing.
    """
    wall_s = (snapshot.end_ns - snapshot.start_ns) / 1e9
    if not laps or wall_s <= 0:
        return [_abstain("outside_laps", "no lap in the window: time outside laps not measured")]
    main = max(laps, key=lambda p: snapshot[p].total)
    others = {p: snapshot[p].total for p in laps if p != main}
    inside = [p for p in snapshot if p.startswith(f"{main}.")]
    others.update(
        {p: snapshot[p].total for p in inside if roles.of(p) in ("evaluation", "checkpoint")}
    )
    outside_s = sum(others.values())
    share = outside_s / wall_s
    level = _level(share, limits, "outside_laps")
    if level is None:
        return []
    largest = sorted(others, key=lambda p: -others[p])[:3]
    named = ", ".join(f"{p} {others[p]:.3f} s" for p in largest)
    return [
        Finding(
            "outside_laps",
            level,
            main,
            snapshot.rank,
            f"{share:.0%} of the window's {wall_s:.3f} s goes to other work than {main}'s "
            f"steps ({named})",
            "evaluate or checkpoint less often, or make that work cheaper",
            {
                "share": share,
                "wall_s": wall_s,
                "lap_s": snapshot[main].total,
                "others": {p: others[p] for p in largest},
            },
        )
    ]


def _self_time(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    out = []
    for lap in laps:
        stats = snapshot[lap]
        if stats.total <= 0 or not any(p.startswith(f"{lap}.") for p in snapshot):
            continue  # a lap without sections explains nothing and hides nothing
        share = stats.self_time / stats.total
        level = _level(share, limits, "self_time")
        if level is not None:
            out.append(
                Finding(
                    "self_time",
                    level,
                    lap,
                    snapshot.rank,
                    f"{share:.0%} of {lap}'s lap time ({stats.self_time:.3f} s) is in no section",
                    f"time the untimed part of {lap} with a section",
                    {"share": share, "self_time_s": stats.self_time, "lap_s": stats.total},
                )
            )
    return out


def _straggler(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    straggler = snapshot.straggler
    if snapshot.across_ranks is None:
        return [_abstain("straggler", "no cross-rank window: stragglers not looked for")]
    if straggler is None:
        return [_abstain("straggler", "fewer than two ranks ran laps: no straggler to name")]
    out = []
    level = _level(straggler.share, limits, "straggler")
    evidence: dict[str, object] = {"share": straggler.share, **straggler.to_dict()}
    if level is not None:
        cause = straggler.cause or "spread over several sections: " + ", ".join(
            straggler.spread_over
        )
        by = (
            "least time in wait sections"
            if straggler.by == "wait"
            else "most lap time outside wait sections"
        )
        out.append(
            Finding(
                "straggler",
                level,
                straggler.cause,
                straggler.rank,
                f"rank {straggler.rank} makes the others wait ({by}): {straggler.excess_s:.3f} s "
                f"({straggler.share:.0%}) over the typical rank; cause {cause}",
                f"look at {straggler.cause or 'those sections'} on rank {straggler.rank}: "
                "its data shard, its device, its host",
                evidence,
            )
        )
    if straggler.chronic_rank is not None:
        windows = int(limits["chronic_windows"])
        out.append(
            Finding(
                "chronic_straggler",
                "critical",
                None,
                straggler.chronic_rank,
                f"rank {straggler.chronic_rank} was the straggler in {straggler.chronic_count} "
                f"of the last {windows} windows",
                f"check rank {straggler.chronic_rank}'s node (thermals, neighbours, network); "
                "its traced steps show where it loses time",
                {"count": straggler.chronic_count, "windows": windows, **evidence},
            )
        )
    return out


def _slow_steps(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    out = []
    for lap in laps:
        stats = snapshot[lap]
        if stats.count < 2 or stats.p50 <= 0:
            continue
        bar = limits["slow_step_factor"] * stats.p50
        lows = (0.0, *snapshot.boundaries)
        slow = sum(n for low, n in zip(lows, stats.buckets, strict=False) if low >= bar)
        if stats.max > bar:
            slow = max(slow, 1)
        if slow == 0:
            continue
        share = slow / stats.count
        level = "warning" if share >= limits["slow_steps_warning"] else "info"
        out.append(
            Finding(
                "slow_steps",
                level,
                lap,
                snapshot.rank,
                f"{slow} of {stats.count} {lap} steps took over {limits['slow_step_factor']:g}x "
                f"the median {stats.p50:.3f} s; the worst {stats.max:.3f} s",
                "open the slow steps' traces (traced whatever the sampling) to see which section",
                {"slow": slow, "steps": stats.count, "median_s": stats.p50, "worst_s": stats.max},
            )
        )
    return out


def _not_measured(kind: str, what: str) -> Callable[..., list[Finding]]:
    def check(
        snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
    ) -> list[Finding]:
        return [_abstain(kind, f"no {what} in the window: {kind.replace('_', ' ')} not watched")]

    return check


_CHECKS: tuple[Callable[[Snapshot, list[str], Roles, Mapping[str, float]], list[Finding]], ...] = (
    _input_bound,
    _outside_laps,
    _self_time,
    _straggler,
    _slow_steps,
    _not_measured("memory_creep", "device memory counters"),
    _not_measured("memory_pressure", "device memory counters"),
    _not_measured("throughput_drop", "item counts (`count()`)"),
)
