"""The kinds of line in looptrace's files, shared by the writers and the offline readers."""

from __future__ import annotations

SNAPSHOT_KIND = "looptrace.snapshot"
SNAPSHOT_VERSION = 1
LOSS_KIND = "looptrace.lost"
HANG_KIND = "looptrace.hang"  # a step past its hang threshold (the snapshot file; see watchdog)
HANG_CLEARED_KIND = "looptrace.hang_cleared"  # that step ended
HANG_KINDS = frozenset({HANG_KIND, HANG_CLEARED_KIND})
