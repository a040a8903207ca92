"""How many examples a property test draws: its own number, scaled for a long search."""

from __future__ import annotations

import os


def examples(n: int) -> int:
    """Return `n` times `LOOPTRACE_EXAMPLES_SCALE` (1 unless set; e.g. 20 for a long search)."""
    return n * max(1, int(os.environ.get("LOOPTRACE_EXAMPLES_SCALE", "1")))
