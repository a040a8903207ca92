"""Durations and sizes as people read them: a unit that keeps a few significant digits."""

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


def format_bytes(size: float) -> str:
    """Return a size in binary units (`512 B`, `1.5 GiB`); "-" for NaN."""
    if math.isnan(size):
        return "-"
    if abs(size) < 1024:
        return f"{size:.0f} B"
    for unit in ("KiB", "MiB"):
        size /= 1024
        if abs(size) < 1024:
            return f"{size:.1f} {unit}"
    return f"{size / 1024:.1f} GiB"
