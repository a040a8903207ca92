"""The kinds of line in looptrace's files, shared by the writers and the offline readers."""

from __future__ import annotations

SNAPSHOT_KIND = "looptrace.snapshot"
SNAPSHOT_VERSION = 1
LOSS_KIND = "looptrace.lost"
