"""What span files cover: the traced steps, a sample biased towards the slow ones.

A span-file summary describes the steps that were traced (the first ones, every Nth and the
slow ones, whatever the sampling), not the run; snapshot files cover every step. The summary
says so, and points at snapshot files lying beside the span files given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

SAMPLED = (
    "spans hold the traced steps only (the first ones, every Nth and the slow ones), so "
    "these figures lean towards slow steps; snapshot files cover every step"
)


def snapshots_beside(names: Sequence[str]) -> str | None:
    """Return a snapshot file in the folder of any input (a file, folder or glob), or None."""
    folders = {Path(name) if Path(name).is_dir() else Path(name).parent for name in names}
    beside = sorted(str(path) for folder in folders for path in folder.glob("snapshots*.jsonl"))
    return beside[0] if beside else None
