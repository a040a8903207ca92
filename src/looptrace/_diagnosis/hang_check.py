"""The `hang` finding: a step of this rank that had not ended, past its threshold, at the close.

A window closes while a step hangs when another thread resets it, or when the process is shut
down (the scheduler's SIGTERM, Ctrl-C) with the step still open: the watchdog's latest view
of the hung step rides on the window (`Snapshot.hang`, a `StandingHang`), and this check
names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from looptrace._diagnosis.finding import Finding

if TYPE_CHECKING:
    from looptrace._stats.roles import Roles
    from looptrace._stats.snapshot import Snapshot


def hang_check(
    snapshot: Snapshot, laps: list[str], roles: Roles, limits: Mapping[str, float]
) -> list[Finding]:
    """Return the `hang` finding of a window closed while one of its steps hung (else none)."""
    hang = snapshot.hang
    if hang is None:
        return []
    waits = roles.of(hang.innermost) == "wait"
    where = "waiting for other ranks in" if waits else "stuck in"
    return [
        Finding(
            "hang",
            "critical",
            hang.innermost,
            snapshot.rank,
            f"step {hang.step:,} of {hang.timer} open for {hang.seconds:,.0f} s (threshold "
            f"{hang.threshold_s:,.0f} s), {where} {hang.innermost} for "
            f"{hang.innermost_seconds:,.0f} s",
            "read the stacks of the hang line or log record; `looptrace summary` of every "
            "rank's snapshot file names the rank the others wait for"
            if waits
            else "read the stacks of the hang line or log record for the call that never returns",
            hang.to_dict(),
        )
    ]
