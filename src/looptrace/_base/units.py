"""Durations as people read them: a unit that keeps three or four significant digits."""

from __future__ import annotations

import math


def format_seconds(seconds: float) -> str:
    """Return a duration with a unit that keeps 3-4 significant digits (`12.3 ms`)."""
    if math.isnan(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            value = seconds / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{seconds * 1e9:.0f} ns"
