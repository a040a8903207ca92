"""The diagnosis over a run's windows: device memory creep and pressure, a throughput drop.

Memory creep and a throughput drop compare a window with earlier ones, as the live looptrace
kept them (`Snapshot.past`); memory pressure compares a window's peak reserved with the
device's total read at its close. Each abstains where its input is missing.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import TYPE_CHECKING

from looptrace._diagnosis.finding import Finding, abstain
from looptrace._diagnosis.history import MIN_WINDOWS
from looptrace._stats.roles import Roles

if TYPE_CHECKING:
    from looptrace._stats.snapshot import Snapshot

_GIB = float(1 << 30)
_NO_DEVICE = "no device memory counters in the window: {} not watched"


def memory_creep(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    """Compare the device's peak allocated with its first window after the warm-up."""
    memory, past = snapshot.memory, snapshot.past
    peak = None if memory is None else memory.device_peak_allocated
    if peak is None or past is None or past.memory_window is None:
        return [abstain("memory_creep", _NO_DEVICE.format("memory creep"))]
    if past.memory_baseline is None or past.memory_window <= past.memory_baseline[0]:
        warmup = int(limits["warmup_windows"])
        return [
            abstain(
                "memory_creep",
                f"the first window after the warm-up ({warmup} windows) is the baseline: "
                "memory creep not judged yet",
            )
        ]
    since, base = past.memory_baseline
    rise = peak - base
    share = rise / base if base > 0 else 0.0
    if rise <= 0 or (
        share < limits["memory_creep_share"] and rise < limits["memory_creep_gib"] * _GIB
    ):
        return []
    windows = past.memory_window - since
    return [
        Finding(
            "memory_creep",
            "warning",
            None,
            snapshot.rank,
            f"device memory creeps: the window's peak allocated {peak / _GIB:.2f} GiB is "
            f"{rise / _GIB:.2f} GiB ({share:.0%}) above the {base / _GIB:.2f} GiB of "
            f"{windows} window{'' if windows == 1 else 's'} earlier",
            "look for tensors kept across steps: a loss kept with its graph, growing lists "
            "or caches",
            {"peak_bytes": peak, "baseline_bytes": base, "rise_bytes": rise, "share": share,
             "windows": windows},
        )
    ]  # fmt: skip


def memory_pressure(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    """Compare the device's peak reserved with its total memory."""
    memory = snapshot.memory
    reserved = None if memory is None else memory.device_peak_reserved
    if memory is None or reserved is None:
        return [abstain("memory_pressure", _NO_DEVICE.format("memory pressure"))]
    total = memory.device_total
    if total is None:
        return [abstain("memory_pressure", "device total memory unknown: pressure not judged")]
    share = reserved / total
    if share < limits["memory_pressure_share"]:
        return []
    retries, ooms = memory.device_alloc_retries or 0, memory.device_ooms or 0
    strained = f"; {retries} allocator retries, {ooms} OOMs" if retries or ooms else ""
    return [
        Finding(
            "memory_pressure",
            "critical" if retries or ooms else "warning",
            None,
            snapshot.rank,
            f"the window's peak reserved {reserved / _GIB:.2f} GiB is {share:.0%} of the "
            f"device's {total / _GIB:.2f} GiB{strained}",
            "a smaller batch or sequence, activation checkpointing, or "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
            {"peak_reserved_bytes": reserved, "total_bytes": total, "share": share,
             "alloc_retries": retries, "ooms": ooms},
        )
    ]  # fmt: skip


def sustained(rates: list[float], share: float) -> tuple[list[float], int]:
    """Return the rates of the windows at the run's sustained level, and the drop's length.

    A window is in a drop when its rate is `share` or more below the median of the sustained
    windows before it (once `MIN_WINDOWS - 1` of them were seen); it then joins no reference,
    so a drop that lasts is measured against the level before it until the rate recovers.
    The length is how many of the last windows in a row were in a drop.
    """
    kept: list[float] = []
    streak = 0
    for rate in rates:
        if len(kept) + 1 >= MIN_WINDOWS and rate < (1 - share) * statistics.median(kept):
            streak += 1
            continue
        kept.append(rate)
        streak = 0
    return kept, streak


def throughput_drop(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    """Compare each unit's rate with the run's sustained level before it (`sustained`)."""
    past = snapshot.past
    if past is None or not past.own.per_s():
        return [abstain("throughput_drop", "no item counts (`count()`) in the window: "
                         "throughput drop not watched")]  # fmt: skip
    if past.window < limits["warmup_windows"]:
        return [abstain("throughput_drop", "a warm-up window: throughput drop not judged")]
    out = []
    short = False
    share = limits["throughput_drop_share"]
    for (path, unit), rate in past.own.per_s().items():
        seen = [w.per_s()[path, unit] for w in past.rates if (path, unit) in w.per_s()]
        level, streak = sustained(seen, share)
        if len(level) + 1 < MIN_WINDOWS:
            short = True
            continue
        reference = statistics.median(level)
        drop = 1 - rate / reference if reference > 0 else 0.0
        if drop < share or streak + 1 < limits["throughput_drop_windows"]:
            continue  # (a single slow window on a busy machine is noise)
        out.append(
            Finding(
                "throughput_drop",
                "warning",
                path,
                snapshot.rank,
                f"{path} counted {rate:.4g} {unit}/s, {drop:.0%} below the run's sustained "
                f"{reference:.4g} {unit}/s (the median of {len(level)} windows before it)",
                "compare this window's sections with an earlier one's: which grew, and "
                "what else ran then",
                {"unit": unit, "per_s": rate, "sustained_per_s": reference, "drop": drop,
                 "windows": len(level)},
            )
        )  # fmt: skip
    if short and not out:
        return [abstain("throughput_drop", f"fewer than {MIN_WINDOWS} windows after the "
                         "warm-up: throughput drop not judged yet")]  # fmt: skip
    return out
