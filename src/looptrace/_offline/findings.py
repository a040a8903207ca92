"""The findings of `looptrace summary`: the worst of every window's diagnosis, most severe first.

The snapshot file records each window's findings (`Snapshot.diagnosis()`, computed where
the roles and thresholds were known); the summary folds them over all windows and ranks of
the files given: one line per (kind, path, rank), its most severe occurrence, in how many
windows it appeared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from looptrace._offline.reader import Window
from looptrace._stats.diagnosis import SEVERITIES

LIMIT = 5


def findings_text(windows: Sequence[Window], limit: int = LIMIT) -> str | None:
    """Return at most `limit` lines of warnings and worse, most severe first; None if none."""
    recorded = windows
    worst: dict[tuple[Any, ...], tuple[dict[str, Any], int]] = {}
    for window in recorded:
        for finding in window.findings:
            if finding["severity"] not in ("critical", "warning"):
                continue  # the summary is for what needs a change
            key = (finding["kind"], finding.get("path"), finding.get("rank"))
            seen, count = worst.get(key, (finding, 0))
            if _rank(finding) <= _rank(seen):
                seen = finding
            worst[key] = (seen, count + 1)
    if not worst:  # a healthy run, or files written before windows were diagnosed
        return None
    ordered = sorted(worst.values(), key=lambda item: (_rank(item[0]), -item[1]))
    lines = [f"findings ({min(limit, len(ordered))} of {len(ordered)}, most severe first):"]
    for finding, count in ordered[:limit]:
        action = finding.get("action")
        lines.append(
            f"  {finding['severity']:<8} {finding['kind']}: {finding['message']} "
            f"({count} of {_windows(len(recorded))})" + (f"; try: {action}" if action else "")
        )
    return "\n".join(lines)


def _rank(finding: dict[str, Any]) -> int:
    severity = finding.get("severity")
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def _windows(n: int) -> str:
    return f"{n} window" if n == 1 else f"{n} windows"
