"""The diagnosis of the host's memory: resident memory creeping, and near the process's limit.

The device checks (`looptrace._diagnosis.trends`) watch the CUDA allocator; a CPU job, and a host
leak of a GPU job (a growing cache, tensors kept on the host), shows in the process's
resident memory only. Its creep compares each window's resident memory at the close with the
first window after the warm-up; its pressure compares it with the most the process may hold
(its cgroup's limit, else the host's memory: `WindowMemory.host_total`). Their findings have
the device checks' kinds, with `evidence["memory"] == "host"`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from looptrace._diagnosis.finding import Finding
from looptrace._stats.roles import Roles

if TYPE_CHECKING:
    from looptrace._stats.snapshot import Snapshot

_GIB = float(1 << 30)


def host_memory_creep(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    """Compare the host resident memory with its first window after the warm-up.

    Both a share (`memory_creep_share`) and a size (`host_creep_gib`) must be crossed: a
    process's resident memory moves with its allocator, its caches and its loader.
    """
    memory, past = snapshot.memory, snapshot.past
    rss = None if memory is None else memory.host_rss
    if rss is None or past is None or past.host_window is None or past.host_baseline is None:
        return []
    since, base = past.host_baseline
    if past.host_window <= since:
        return []
    rise = rss - base
    share = rise / base if base > 0 else 0.0
    if share < limits["memory_creep_share"] or rise < limits["host_creep_gib"] * _GIB:
        return []
    windows = past.host_window - since
    return [
        Finding(
            "memory_creep",
            "warning",
            None,
            snapshot.rank,
            f"host memory creeps: the process's resident {rss / _GIB:.2f} GiB is "
            f"{rise / _GIB:.2f} GiB ({share:.0%}) above the {base / _GIB:.2f} GiB of "
            f"{windows} window{'' if windows == 1 else 's'} earlier",
            "look for what grows on the host: lists or caches kept across steps, tensors "
            "moved to the CPU and kept, a loader's prefetch",
            {"memory": "host", "rss_bytes": rss, "baseline_bytes": base, "rise_bytes": rise,
             "share": share, "windows": windows},
        )
    ]  # fmt: skip


def host_memory_pressure(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    """Compare the host resident memory with the most the process may hold."""
    memory = snapshot.memory
    if memory is None or memory.host_rss is None or not memory.host_total:
        return []
    share = memory.host_rss / memory.host_total
    if share < limits["memory_pressure_share"]:
        return []
    return [
        Finding(
            "memory_pressure",
            "warning",
            None,
            snapshot.rank,
            f"the process's resident memory {memory.host_rss / _GIB:.2f} GiB is {share:.0%} "
            f"of the {memory.host_total / _GIB:.2f} GiB it may hold",
            "fewer or lighter DataLoader workers, a smaller prefetch or cache, or a larger "
            "memory limit",
            {"memory": "host", "rss_bytes": memory.host_rss, "total_bytes": memory.host_total,
             "share": share},
        )
    ]  # fmt: skip
