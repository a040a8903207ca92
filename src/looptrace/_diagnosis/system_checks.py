"""The diagnosis's use of the system figures: a GPU left idle and why, a loader short of CPU.

They run after the other checks of a window (`diagnosis.diagnose`), whose findings name the
likely cause of an idle GPU; a window with too few readings of a figure, or none, abstains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from looptrace._diagnosis.finding import Finding, abstain
from looptrace._diagnosis.finding import level as level_of

if TYPE_CHECKING:
    from looptrace._stats.snapshot import Snapshot
    from looptrace._stats.system_figures import FigureStats

# The findings that explain a GPU waiting, in the order they are told (the first found wins).
_CAUSES = ("hang", "input_bound", "straggler", "outside_laps", "self_time")
_UTILISATION = "_utilization_percent"


def system_checks(
    snapshot: Snapshot, found: Sequence[Finding], limits: Mapping[str, float]
) -> list[Finding]:
    """Return the findings of the window's system figures, given the window's other findings."""
    return [*gpu_idle(snapshot, found, limits), *cpu_starved(snapshot, found, limits)]


def gpu_idle(
    snapshot: Snapshot, found: Sequence[Finding], limits: Mapping[str, float]
) -> list[Finding]:
    """Return a finding when a GPU was idle for much of the window, with the likely cause."""
    gpus = {
        name.removesuffix(_UTILISATION): stats
        for name, stats in _figures(snapshot, limits).items()
        if name.startswith("gpu") and name.endswith(_UTILISATION)
    }
    if not gpus:
        return [abstain("gpu_idle", "no GPU utilisation sampled in the window: not watched")]
    device = min(gpus, key=lambda name: (gpus[name].mean, name))
    busy = gpus[device].mean / 100
    idle = max(0.0, 1.0 - busy)
    level = level_of(idle, limits, "gpu_idle")
    if level is None:
        return []
    cause = next((f for f in found if f.kind in _CAUSES and f.severity != "info"), None)
    why = (
        f"; likely cause: {cause.kind} ({cause.message})"
        if cause is not None
        else "; no cause among the timed sections: look inside the step (small batches, "
        "host-device copies, synchronisations)"
    )
    return [
        Finding(
            "gpu_idle",
            level,
            cause.path if cause is not None else None,
            snapshot.rank,
            f"{device} was busy {busy:.0%} of the window on average "
            f"({gpus[device].samples} readings){why}",
            cause.action if cause is not None else "profile a step (torch.profiler)",
            {
                "device": device,
                "utilization": busy,
                "samples": gpus[device].samples,
                "cause": cause.kind if cause is not None else None,
            },
        )
    ]


def cpu_starved(
    snapshot: Snapshot, found: Sequence[Finding], limits: Mapping[str, float]
) -> list[Finding]:
    """Return a finding when the loop waits for input while the host's CPUs are saturated."""
    waiting = next((f for f in found if f.kind == "input_bound" and f.severity != "info"), None)
    if waiting is None:
        return []
    host = _figures(snapshot, limits).get("host_cpu_percent")
    if host is None:
        return [abstain("cpu_starved", "no host CPU figure sampled in the window: not judged")]
    busy = host.mean / 100
    if busy < limits["host_cpu_busy"]:
        return []
    share = waiting.evidence.get("share")
    return [
        Finding(
            "cpu_starved",
            "warning",
            waiting.path,
            snapshot.rank,
            f"the host's CPUs were {busy:.0%} busy on average ({host.samples} readings) while "
            + (f"{share:.0%} of the lap" if isinstance(share, float) else "the lap")
            + f" waited for input in {waiting.path}: the loader is short of CPU",
            "lighter transforms, fewer processes per host, or decoding and augmentation on the "
            "GPU; more DataLoader workers will not help",
            {"host_cpu": busy, "samples": host.samples, "input_share": share},
        )
    ]


def _figures(snapshot: Snapshot, limits: Mapping[str, float]) -> dict[str, FigureStats]:
    """Return the window's system figures read often enough to judge (none: not sampled)."""
    if snapshot.system is None:
        return {}
    least = limits["system_min_samples"]
    return {name: s for name, s in snapshot.system.figures.items() if s.samples >= least}
