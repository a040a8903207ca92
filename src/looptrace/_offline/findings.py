"""The recorded findings of snapshot files: the worst of each window's diagnosis, worst first.

The snapshot file records each window's findings (`Snapshot.diagnosis()`, computed where
the roles and thresholds were known); `looptrace summary`, `report` and `watch` fold them over
the windows they read: one entry per (kind, path, rank), its most severe occurrence and in how
many windows it appeared, of the windows diagnosed (a partial window, without a whole lap, is
not). One fold and one line format serve all three.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from looptrace._diagnosis.diagnosis import SEVERITIES
from looptrace._offline.text import escaped
from looptrace._offline.window_records import Window
from looptrace._stats.partial import partial_window

LIMIT = 5


@dataclass(frozen=True, slots=True)
class Recorded:
    """One finding folded over windows: its most severe occurrence and how often it came."""

    finding: dict[str, Any]
    windows: int  # the windows it appeared in
    of: int  # the windows read
    where: str = ""  # "rank N" when the windows are of several ranks and the message omits it

    @property
    def severity(self) -> str:
        """Return `critical` or `warning`."""
        return str(self.finding["severity"])

    @property
    def action(self) -> str:
        """Return the next thing to try ("" if none)."""
        return str(self.finding.get("action") or "")

    def text(self, *, action: bool = True) -> str:
        """Return the finding in one line: kind, message, in how many windows, what to try."""
        return (
            (f"{self.where}: " if self.where else "")
            + f"{self.finding['kind']}: {self.finding['message']} "
            f"({self.windows} of {_windows(self.of)})"
            + (f"; try: {self.action}" if action and self.action else "")
        )


def recorded_findings(windows: Iterable[Window]) -> list[Recorded]:
    """Return the warnings and worse of `windows`, most severe then most frequent first."""
    fold = FindingsFold()
    for window in windows:
        fold.add(window)
    return fold.recorded()


class FindingsFold:
    """`recorded_findings` window by window: per (kind, path, rank) the worst and a count."""

    def __init__(self) -> None:
        """Hold no window yet."""
        self._worst: dict[tuple[Any, ...], tuple[dict[str, Any], int]] = {}
        self._ranks: set[int] = set()
        self._judged = 0  # windows with a whole lap (a partial window is not diagnosed)

    def add(self, window: Window) -> None:
        """Add one window's findings."""
        worst = self._worst
        for finding in window.findings:
            if finding["severity"] not in ("critical", "warning"):
                continue  # what needs a change
            key = (finding["kind"], finding.get("path"), finding.get("rank"))
            seen, count = worst.get(key, (finding, 0))
            if _rank(finding) <= _rank(seen):
                seen = finding
            worst[key] = (seen, count + 1)
        if len(self._ranks) < 2:
            self._ranks.add(window.rank)
        self._judged += not partial_window(window.stats)

    def recorded(self) -> list[Recorded]:
        """Return the findings of the windows added, most severe then most frequent first."""
        ordered = sorted(self._worst.values(), key=lambda item: (_rank(item[0]), -item[1]))
        several = len(self._ranks) > 1
        return [
            Recorded(finding, count, self._judged, _where(finding) if several else "")
            for finding, count in ordered
        ]


def _where(finding: dict[str, Any]) -> str:
    """Return "rank N" for a finding of one rank whose message does not name it."""
    rank = finding.get("rank")
    return "" if rank is None or f"rank {rank}" in finding["message"] else f"rank {rank}"


def findings_text(windows: Iterable[Window], limit: int = LIMIT) -> str | None:
    """Return at most `limit` lines of warnings and worse, most severe first; None if none."""
    return recorded_text(recorded_findings(windows), limit)


def recorded_text(found: Sequence[Recorded], limit: int = LIMIT) -> str | None:
    """Return at most `limit` lines of recorded findings (most severe first); None if none."""
    if not found:  # a healthy run, or files written before windows were diagnosed
        return None
    lines = [f"findings ({min(limit, len(found))} of {len(found)}, most severe first):"]
    lines += [f"  {escaped(item.severity):<8} {escaped(item.text())}" for item in found[:limit]]
    return "\n".join(lines)


def _rank(finding: dict[str, Any]) -> int:
    severity = finding.get("severity")
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def _windows(n: int) -> str:
    return f"{n} window" if n == 1 else f"{n} windows"
