"""Where each window goes at `reset()`, and what `shutdown()` releases."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from looptrace._stats.hang import StandingHang
from looptrace._stats.snapshot import Snapshot

SnapshotSink = Callable[[Snapshot], object]


@dataclass
class Outputs:
    """The output hooks of one `Looptrace`.

    Attributes:
        on_reset: called with every window's snapshot, after it is closed (metric exporters,
            snapshot files). Each runs under looptrace's internal-error guard.
        on_shutdown: called once by `shutdown()`, after the last window, in order.
        on_close: called once by `shutdown()` before the last window closes, while the
            sections still running are open (the hang watchdog's last word).
        standing_hang: the step the hang watchdog reports hung and not ended, if any; each
            closed window carries it (`Snapshot.hang`).

    """

    on_reset: list[SnapshotSink] = field(default_factory=list)
    on_shutdown: list[Callable[[], object]] = field(default_factory=list)
    on_close: list[Callable[[], object]] = field(default_factory=list)
    standing_hang: Callable[[], StandingHang | None] = lambda: None
