"""Counters of what looptrace refused, lost or swallowed, so failures are visible, not silent."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

_log = logging.getLogger("looptrace")


@dataclass(frozen=True, slots=True)
class Health:
    """What went wrong since `configure()`: none of these ever raised into the caller.

    Attributes:
        misuse: calls ignored by the misuse policy (`stop()` on a stopped timer, use after
            `shutdown()`).
        internal_errors: exceptions caught inside looptrace's processors, exporters and
            timer calls.
        overflowed: measurements counted under `"other"` because of the path cap.
        dropped_spans: spans an exporter failed to deliver.
        failed_metric_pushes: OTLP metric pushes that were not delivered (the next push
            carries the totals again, so a failure loses no counts while a later one succeeds).
        slow_laps_suppressed: slow laps not traced because slower ones filled the budget of
            their window (the 3 worst of every 60 laps of a timer are traced for being slow).
        dropped_windows: `reset()` windows an output (a metrics total, the snapshot file) did
            not take because it was too far behind; the snapshot file records the gap.

    """

    misuse: int = 0
    internal_errors: int = 0
    overflowed: int = 0
    dropped_spans: int = 0
    failed_metric_pushes: int = 0
    slow_laps_suppressed: int = 0
    dropped_windows: int = 0


class Incidents:
    """Counts misuse, internal errors and undelivered spans; logs the first of each kind once."""

    def __init__(self) -> None:
        self.misuse = 0
        self.internal_errors = 0
        self.dropped_spans = 0
        self.failed_metric_pushes = 0
        self.slow_laps_suppressed = 0
        self.dropped_windows = 0
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def after_fork_in_child(self) -> None:
        """Use a fresh lock in a forked child (another thread may have held this one)."""
        self._lock = threading.Lock()

    def misused(self, kind: str, message: str) -> None:
        """Count one ignored call; log the first of each kind as a warning."""
        with self._lock:
            self.misuse += 1
            first = kind not in self._seen
            self._seen.add(kind)
        if first:
            _log.warning("looptrace: %s (ignored; further cases are counted, not logged)", message)

    def dropped(self, spans: int) -> None:
        """Count spans that were not delivered (export failed, queue full); log the first."""
        if spans <= 0:
            return
        with self._lock:
            first = self.dropped_spans == 0
            self.dropped_spans += spans
        if first:
            _log.warning(
                "looptrace: %d span(s) could not be exported; training goes on and further "
                "losses are counted in lt.health().dropped_spans, not logged",
                spans,
            )

    def push_failed(self) -> None:
        """Count one undelivered metrics push; log the first."""
        with self._lock:
            first = self.failed_metric_pushes == 0
            self.failed_metric_pushes += 1
        if first:
            _log.warning(
                "looptrace: a metrics push could not be delivered; the next push carries the "
                "totals again, and further failures are counted in "
                "lt.health().failed_metric_pushes, not logged"
            )

    def windows_dropped(self, output: str, reason: str) -> None:
        """Count one window an output did not take; log the first per output as a warning."""
        with self._lock:
            self.dropped_windows += 1
            first = f"window:{output}" not in self._seen
            self._seen.add(f"window:{output}")
        if first:
            _log.warning(
                "looptrace: a reset() window was dropped: %s (training goes on; further drops "
                "are counted in lt.health().dropped_windows, not logged)",
                reason,
            )

    def slow_lap_suppressed(self) -> None:
        """Count one slow lap left untraced by its window's budget (not logged: no failure)."""
        with self._lock:
            self.slow_laps_suppressed += 1

    def failed(self, where: str) -> None:
        """Count one swallowed exception; log the first per site with its traceback.

        Call from inside an `except` block.
        """
        with self._lock:
            self.internal_errors += 1
            first = where not in self._seen
            self._seen.add(where)
        if first:
            _log.exception("looptrace: internal error in %s (further ones are counted)", where)

    def stalled(self, kind: str, message: str) -> None:
        """Count one wait looptrace gave up (an internal error); log the first per kind."""
        self.write_failed(kind, message)

    def write_failed(self, kind: str, message: str) -> None:
        """Count one failed write of an output; log the first per kind as one warning line."""
        with self._lock:
            self.internal_errors += 1
        self.said_once(kind, message)

    def said_once(self, kind: str, message: str) -> None:
        """Log the first failure of a kind as one warning line; count nothing.

        For a failure whose loss the caller counts elsewhere (spans in `dropped_spans`), so
        that one loss is counted once.
        """
        with self._lock:
            first = kind not in self._seen
            self._seen.add(kind)
        if first:
            _log.warning("looptrace: %s (further failures are counted, not logged)", message)
