"""A step of this rank that had not ended, past its threshold, when its window closed.

A window closes while a step hangs when another thread resets it, or when the process is shut
down (the scheduler's SIGTERM, Ctrl-C) with the step still open: the watchdog's latest view
of the hung step rides on the window (`Snapshot.hang`), and the diagnosis names it (the `hang`
finding, `looptrace._diagnosis.hang_check`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class StandingHang:
    """A step reported hung and not ended, as the watchdog saw it last."""

    timer: str  # the timer whose step hangs
    step: int
    seconds: float  # the step's age
    threshold_s: float
    thread: str
    innermost: str  # the innermost open section of that thread
    innermost_seconds: float

    def to_dict(self) -> dict[str, object]:
        """Return it as plain data."""
        return asdict(self)
