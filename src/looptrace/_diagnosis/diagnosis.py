"""A diagnosis in words: findings from one window's snapshot (and its cross-rank spread).

A pure function of what a snapshot holds, the roles of its sections and the thresholds
(`looptrace._stats.thresholds`): the snapshot, the snapshot file's reader and `looptrace
summary` share it. Each check either finds something (a warning or worse when a threshold
is crossed), says nothing (healthy), or abstains with an `info` finding naming the missing
input ("no `data` section: input wait not measured"); it never guesses a role.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from looptrace._base.units import format_seconds
from looptrace._diagnosis.finding import KINDS, SEVERITIES, Finding, abstain, at_least, ranked
from looptrace._diagnosis.finding import level as level_of
from looptrace._diagnosis.hang_check import hang_check
from looptrace._diagnosis.host_memory import host_memory_creep, host_memory_pressure
from looptrace._diagnosis.system_checks import system_checks
from looptrace._diagnosis.trends import memory_creep, memory_pressure, throughput_drop
from looptrace._stats.roles import Roles
from looptrace._stats.straggler import lap_paths, window_steps
from looptrace._stats.thresholds import thresholds

if TYPE_CHECKING:
    from looptrace._stats.snapshot import SectionStats, Snapshot

__all__ = ["KINDS", "SEVERITIES", "Finding", "diagnose", "findings_of", "ranked"]


def findings_of(
    snapshot: Snapshot, min_severity: str, overrides: Mapping[str, float]
) -> list[Finding]:
    """Return `Snapshot.diagnosis()`: the window's findings of `min_severity` or worse.

    `overrides` replace the window's thresholds (`snapshot.limits`) by name.

    Raises:
        ValueError: an unknown threshold, a value it cannot take, or an unknown severity.

    """
    limits = thresholds({**snapshot.limits, **overrides}) if overrides else snapshot.limits
    return at_least(diagnose(snapshot, snapshot.roles, limits), min_severity)


def diagnose(snapshot: Snapshot, roles: Roles, limits: Mapping[str, float]) -> list[Finding]:
    """Return the findings of one window, most severe first."""
    if snapshot.partial:  # the tail of a lap: no share, rate or comparison means anything,
        # but a step hung at the close (the usual partial window at a hang's exit) is named
        return ranked(
            [
                *hang_check(snapshot, [], roles, limits),
                abstain("partial_window", "a partial window (no whole lap): not diagnosed"),
            ]
        )
    findings: list[Finding] = []
    paths = [p for p in snapshot if snapshot[p].count > 0 or snapshot[p].total > 0]
    laps = [p for p in lap_paths(paths) if snapshot[p].count > 0]
    for check in _CHECKS:
        findings.extend(check(snapshot, laps, roles, limits))
    findings.extend(system_checks(snapshot, ranked(findings), limits))  # (causes: the others)
    return ranked(findings)


def _typical_total(snapshot: Snapshot, path: str) -> float:
    """Return the path's total on the typical rank (`middle_mean`), else this rank's."""
    spread = None if snapshot.across_ranks is None else snapshot.across_ranks.get(path)
    if spread is None:
        return snapshot[path].total
    return middle_mean(spread.ranks, spread.total.min, spread.total.max, spread.total.mean)


def middle_mean(ranks: int, low: float, high: float, mean: float) -> float:
    """Return the typical rank's figure: the mean over the ranks less the lowest and highest.

    The median of 3 or 4 ranks, and for more a mean that one slow (or fast) rank cannot
    move: a single slow loader is a straggler, not the job's input wait. Of 2 ranks, the
    lower (both must wait for the job to), of 1 its own. The reduce keeps min, max and mean
    only, in bytes independent of the ranks.
    """
    if ranks == 2:  # one slow rank of two is a straggler: the typical one is the other
        return low
    if ranks < 3:
        return mean
    return min(high, max(low, (ranks * mean - low - high) / (ranks - 2)))


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
        return [abstain("input_bound", f"no {names} section: input wait not measured")]
    out = []
    for lap, path in found:
        lap_s = _typical_total(snapshot, lap)
        data_s = _typical_total(snapshot, path)
        share = data_s / lap_s if lap_s > 0 else 0.0
        level = level_of(share, limits, "input_bound")
        if level is not None:
            who = "the median rank's" if snapshot.across_ranks is not None else "the"
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
    Other timers count at most the window's time outside the main loop's laps.
    """
    wall_s = (snapshot.end_ns - snapshot.start_ns) / 1e9
    if not laps or wall_s <= 0:
        return [abstain("outside_laps", "no lap in the window: time outside laps not measured")]
    main = max(laps, key=lambda p: snapshot[p].total)
    others = {p: snapshot[p].total for p in laps if p != main}
    # Other timers count up to the time main's laps did not run: one may run around them
    # (a framework's timer of the whole fit), and its time then overlaps theirs.
    outside_s = min(sum(others.values()), max(0.0, wall_s - snapshot[main].total))
    inside = [p for p in snapshot if p.startswith(f"{main}.")]
    roled = {p: snapshot[p].total for p in inside if roles.of(p) in ("evaluation", "checkpoint")}
    others.update(roled)
    outside_s += sum(roled.values())
    share = outside_s / wall_s
    level = level_of(share, limits, "outside_laps")
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
        level = level_of(share, limits, "self_time")
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
        return [abstain("straggler", "no cross-rank window: stragglers not looked for")]
    if straggler is None:
        return [abstain("straggler", "fewer than two ranks ran laps: no straggler to name")]
    if straggler.by != "wait":
        return [_no_wait_section(straggler.to_dict())]
    out = []
    level = level_of(straggler.share, limits, "straggler")
    persists = straggler.streak >= limits["straggler_windows"]
    if level is not None and not (straggler.effective(window_steps(snapshot), limits) and persists):
        level = "info"  # noise, or not yet persistent: no warning
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


def _no_wait_section(evidence: dict[str, object]) -> Finding:
    """Return the one finding of a cross-rank window without a wait section: no culprit.

    Ranks that wait for each other inside the laps (DDP's all-reduce in `backward`) make
    every lap as long as the slowest rank's: without knowing where they wait, the rank with
    the most lap time is any rank, so none is named.
    """
    return Finding(
        "straggler",
        "info",
        None,
        None,
        "no wait section known: the rank the others wait for cannot be told from the ranks "
        "that wait, so no straggler is named",
        'mark where ranks wait: configure(wait_sections=("backward",)) for DDP, or '
        "record(name, wait=True) / section(name, wait=True) around the collective",
        {"abstained": True, **evidence},
    )


def _slow_steps(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    """Count the steps slower than the window's median by the slow-step bar.

    A warning needs slow steps past their share in `slow_steps_windows` windows in a row,
    this one last (a busy machine's one-window burst is `info`): the earlier windows are the
    ones the live looptrace kept (`Past.earlier()`); a snapshot without them warns only when
    one window is asked for. A warm-up window's slow steps are `info`: a run's first steps are
    slow by nature (allocation, compilation, a DDP model's first buckets).
    """
    past = snapshot.past
    warmup = past is not None and past.window < limits["warmup_windows"]
    out = []
    for lap in laps:
        counted = _slow_count(snapshot, lap, limits)
        if counted is None or counted[0] == 0:
            continue
        slow, stats = counted
        share = slow / stats.count
        in_a_row = (
            _windows_in_a_row(snapshot, lap, limits) if share >= limits["slow_steps_warning"] else 0
        )
        warns = in_a_row >= limits["slow_steps_windows"] and not warmup
        out.append(
            Finding(
                "slow_steps",
                "warning" if warns else "info",
                lap,
                snapshot.rank,
                f"{slow} of {stats.count} {lap} steps took over {limits['slow_step_factor']:g}x "
                f"the median {format_seconds(stats.p50)}; the worst {format_seconds(stats.max)}",
                "open the slow steps' traces to see which section (where spans are exported, "
                "the worst 3 of every 60 steps are traced whatever the sampling)",
                {
                    "slow": slow,
                    "steps": stats.count,
                    "median_s": stats.p50,
                    "worst_s": stats.max,
                    "windows_in_a_row": in_a_row,
                },
            )
        )
    return out


def _slow_count(
    snapshot: Snapshot, lap: str, limits: Mapping[str, float]
) -> tuple[int, SectionStats] | None:
    """Return how many of `lap`'s steps in `snapshot` are slow, with its statistics.

    None where the window cannot tell (fewer than 2 steps, no median, or no such lap).
    """
    if lap not in snapshot:
        return None
    stats = snapshot[lap]
    if stats.count < 2 or not stats.p50 > 0:
        return None
    # (scheduling noise makes sub-millisecond steps a few times slower, harmlessly)
    bar = max(limits["slow_step_factor"] * stats.p50, stats.p50 + limits["slow_step_min_excess_s"])
    lows = (0.0, *snapshot.boundaries)
    slow = sum(n for low, n in zip(lows, stats.buckets, strict=False) if low >= bar)
    if stats.max > bar:
        slow = max(slow, 1)
    return slow, stats


def _windows_in_a_row(snapshot: Snapshot, lap: str, limits: Mapping[str, float]) -> int:
    """Return how many windows in a row, `snapshot` last, had slow `lap` steps past their share.

    It looks back no further than `slow_steps_windows` needs.
    """
    in_a_row = 1
    earlier = [] if snapshot.past is None else snapshot.past.earlier()
    for window in earlier[: int(limits["slow_steps_windows"]) - 1]:
        counted = _slow_count(window, lap, limits)
        if counted is None or counted[0] / counted[1].count < limits["slow_steps_warning"]:
            break
        in_a_row += 1
    return in_a_row


_CHECKS: tuple[Callable[[Snapshot, list[str], Roles, Mapping[str, float]], list[Finding]], ...] = (
    _input_bound,
    _outside_laps,
    _self_time,
    _straggler,
    _slow_steps,
    memory_creep,
    memory_pressure,
    host_memory_creep,
    host_memory_pressure,
    throughput_drop,
    hang_check,
)
