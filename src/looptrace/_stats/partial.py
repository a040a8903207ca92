"""A partial window: one that holds parts of laps only, too short to judge.

A run that closes with `shutdown()` shortly after its last `reset()` leaves a window with the
tail of one lap: its shares, per-lap rates and comparisons would say nothing true, so the
diagnosis, the per-lap rates and the offline readers leave it out (its time still counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from looptrace._stats.straggler import lap_paths

if TYPE_CHECKING:
    from looptrace._stats.snapshot import SectionStats


def partial_window(stats: Mapping[str, SectionStats]) -> bool:
    """Whether a window with laps holds no whole one: a window too short to judge.

    A lap timer's laps follow each other, so of the laps that ended in a window only the
    first can have begun before it: a window holds a whole lap when two laps of a timer
    ended in it, or one whose duration fits in the timer's time in it. A window that ends a
    run shortly after its last `reset()` holds the tail of one lap: partial. A window where
    no lap ended (empty, or inside one long lap) is not partial: it has no lap to judge.
    """
    laps = [stats[p] for p in lap_paths(list(stats))]
    ended = [lap for lap in laps if lap.count > 0]
    return bool(ended) and not any(
        lap.count >= 2 or lap.total >= lap.max * (1 - 1e-9) for lap in ended
    )
