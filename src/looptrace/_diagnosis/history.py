"""What a window's diagnosis sees of the run before it: memory since the warm-up, recent rates.

Memory creep, a throughput drop and slow steps that persist are not in one window: the live
looptrace keeps a small, bounded history of its windows (`RunHistory`) and hands each closing
window a frozen view of it (`Past`). Keeping a window costs the closing thread a few
references: its units per second are summed, and its slow steps counted, when a diagnosis
first reads them, off the training thread when nobody reads them there.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from looptrace._stats.rates import sum_counts
from looptrace._stats.tally import Tally
from looptrace._stats.thresholds import RECENT_WINDOWS

if TYPE_CHECKING:
    from looptrace._stats.snapshot import Snapshot

KEPT_WINDOWS = 100  # a run's median rate is over at most its latest this many windows
MIN_WINDOWS = 3  # the fewest windows (this one included) whose median is a run's


class WindowRates:
    """One window's units per second of its wall time by (timer path, unit), summed once."""

    __slots__ = ("_counts", "_per_s", "_window_s")

    def __init__(self, counts: Iterable[Mapping[tuple[str, str], Tally]], window_s: float) -> None:
        self._counts = list(counts)
        self._window_s = window_s
        self._per_s: dict[tuple[str, str], float] | None = None

    def per_s(self) -> Mapping[tuple[str, str], float]:
        """Return `{(path, unit): units per second}` of the units counted in the window."""
        per_s = self._per_s
        if per_s is None:
            window_s = self._window_s
            totals = sum_counts(self._counts) if window_s > 0 else {}
            per_s = {(p, u): n / window_s for p, units in totals.items() for u, n in units.items()}
            self._per_s, self._counts = per_s, []
        return per_s


@dataclass(frozen=True, slots=True)
class Past:
    """The run before a window, as its live looptrace saw it.

    Attributes:
        window: the window's number among its timer's windows, from 0.
        memory_window: its number among the windows with device peaks, from 0 (None: it has
            none).
        memory_baseline: `(number, bytes)` of the first window with a device peak allocated
            after the warm-up (`warmup_windows`), None until there is one.
        rates: the units per second of this timer's earlier windows after the warm-up,
            oldest first, at most `KEPT_WINDOWS`.
        own: this window's units per second.
        host_window: its number among the windows with a host resident memory, from 0 (None:
            it has none).
        host_baseline: `(number, bytes)` of the first window with a host resident memory
            after the warm-up, None until there is one.
        recent: this timer's latest windows before this one, oldest first, at most
            `RECENT_WINDOWS`, by weak reference (the history holds them; a reference that
            reads None is a window no longer kept).

    """

    window: int
    memory_window: int | None
    memory_baseline: tuple[int, int] | None
    rates: tuple[WindowRates, ...]
    own: WindowRates
    host_window: int | None = None
    host_baseline: tuple[int, int] | None = None
    recent: tuple[weakref.ref[Snapshot], ...] = ()

    def earlier(self) -> list[Snapshot]:
        """Return the latest windows before this one still kept, newest first."""
        kept = []
        for ref in reversed(self.recent):
            snapshot = ref()
            if snapshot is None:
                break
            kept.append(snapshot)
        return kept


class RunHistory:
    """The bounded history one looptrace keeps of its windows, per timer whose window it is."""

    __slots__ = (
        "_baseline",
        "_host_baseline",
        "_host_windows",
        "_memory_windows",
        "_rates",
        "_recent",
        "_windows",
    )

    def __init__(self) -> None:
        self._windows: dict[str, int] = {}
        self._rates: dict[str, collections.deque[WindowRates]] = {}
        self._memory_windows = 0
        self._baseline: tuple[int, int] | None = None
        self._host_windows = 0
        self._host_baseline: tuple[int, int] | None = None
        # The latest windows of each timer, held here only: a window's `Past` refers to the
        # ones before it weakly, so no chain of windows outlives this bound.
        self._recent: dict[str, collections.deque[Snapshot]] = {}

    def add(self, snapshot: Snapshot, warmup: int) -> Past:
        """Keep the closing window `snapshot`; return what its diagnosis sees of the run."""
        subtree = snapshot.subtree
        window = self._windows.get(subtree, 0)
        self._windows[subtree] = window + 1
        kept = self._rates.get(subtree)
        if kept is None:
            kept = self._rates[subtree] = collections.deque(maxlen=KEPT_WINDOWS - 1)
        earlier = tuple(kept)
        own = WindowRates(snapshot.handed_counts(), (snapshot.end_ns - snapshot.start_ns) / 1e9)
        if window >= warmup:
            kept.append(own)
        memory_window = None
        peak = None if snapshot.memory is None else snapshot.memory.device_peak_allocated
        if peak is not None:
            memory_window = self._memory_windows
            self._memory_windows += 1
            if self._baseline is None and memory_window >= warmup:
                self._baseline = (memory_window, peak)
        host_window = None
        rss = None if snapshot.memory is None else snapshot.memory.host_rss
        if rss is not None:
            host_window = self._host_windows
            self._host_windows += 1
            if self._host_baseline is None and host_window >= warmup:
                self._host_baseline = (host_window, rss)
        recent = self._recent.get(subtree)
        if recent is None:
            recent = self._recent[subtree] = collections.deque(maxlen=RECENT_WINDOWS)
        refs = tuple(weakref.ref(kept_window) for kept_window in recent)
        recent.append(snapshot)
        return Past(
            window,
            memory_window,
            self._baseline,
            earlier,
            own,
            host_window,
            self._host_baseline,
            refs,
        )
