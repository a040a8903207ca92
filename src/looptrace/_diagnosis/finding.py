"""A finding of the diagnosis: its kind, severity, where, a message with numbers, an action."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

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
    "gpu_idle",
    "cpu_starved",
    "hang",
    "partial_window",
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


def at_least(findings: list[Finding], min_severity: str) -> list[Finding]:
    """Return the findings of `min_severity` or worse (a name of `SEVERITIES`)."""
    if min_severity not in SEVERITIES:
        raise ValueError(
            f"min_severity: expected one of {', '.join(SEVERITIES)}, got {min_severity!r}"[:200]
        )
    worst = SEVERITIES.index(min_severity)
    return [f for f in findings if SEVERITIES.index(f.severity) <= worst]


def level(share: float, limits: Mapping[str, float], kind: str) -> str | None:
    if share >= limits[f"{kind}_critical"]:
        return "critical"
    if share >= limits[f"{kind}_warning"]:
        return "warning"
    return None


def abstain(kind: str, why: str) -> Finding:
    return Finding(kind, "info", None, None, why, "", {"abstained": True})
