"""`configure(diagnose="log")`: each finding logged once when it appears and once when it clears.

At each window's close the window is queued (constant work on the closing thread); a thread
of its own diagnoses it (`Snapshot.diagnosis()`) and compares its warnings and worse with the
previous window of the same timer: a finding new by (kind, path, rank) is logged to the
`looptrace` logger (ERROR when critical, else WARNING), one gone is logged as cleared
(WARNING). Abstentions and `info` findings are not logged; an empty window changes nothing.
"""

from __future__ import annotations

import logging
import os
import weakref

from looptrace._diagnosis.finding import Finding
from looptrace._export.coalesced import Coalesced
from looptrace._export.line_file import FLUSH_TIMEOUT_S
from looptrace._export.window_queue import WindowQueue
from looptrace._stats.health import Incidents
from looptrace._stats.snapshot import Snapshot

_log = logging.getLogger("looptrace")

Key = tuple[str, str | None, int | None]


class FindingsLog:
    """An `Outputs.on_reset` sink logging findings as they appear and clear, off the loop."""

    def __init__(self, incidents: Incidents) -> None:
        self._incidents = incidents
        self._queue = WindowQueue(incidents, "the findings log")
        self._runs = Coalesced(self._log_queued, "looptrace-findings-log")
        self._active: dict[str, dict[Key, Finding]] = {}  # timer path -> findings standing
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def renew() -> None:  # the parent's windows are the parent's to log
                log = ref()
                if log is not None:
                    log._queue.after_fork_in_child()
                    log._runs.after_fork_in_child(closed=log._runs.closed)

            os.register_at_fork(after_in_child=renew)

    def __call__(self, snapshot: Snapshot) -> None:
        """Queue a closed window for its diagnosis; constant work."""
        self._queue.put(snapshot)
        self._runs.request()

    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> bool:
        """Log what the windows queued so far found; return whether that finished in time."""
        return self._runs.wait(self._runs.request(), timeout_s)

    def close(self) -> None:
        """Log what the queued windows found (within `FLUSH_TIMEOUT_S`); then log nothing more."""
        self.flush()
        self._runs.close()

    def _log_queued(self, _ticket: int) -> None:
        windows, _dropped = self._queue.take()
        for snapshot in windows:
            try:
                self._compare(snapshot)
            except Exception:
                self._incidents.failed("the findings log")

    def _compare(self, snapshot: Snapshot) -> None:
        if not snapshot:
            return  # nothing measured: nothing appears or clears
        now = {
            (f.kind, f.path, f.rank): f
            for f in snapshot.diagnosis()
            if f.severity in ("critical", "warning")
        }
        before = self._active.get(snapshot.subtree, {})
        where = f"window of {snapshot.subtree} at step {snapshot.step}"
        for key, finding in now.items():
            if key not in before:
                level = logging.ERROR if finding.severity == "critical" else logging.WARNING
                _log.log(
                    level,
                    "looptrace finding %s %s (%s): %s; try: %s",
                    finding.severity,
                    finding.kind,
                    where,
                    finding.message,
                    finding.action,
                )
        for key, finding in before.items():
            if key not in now:
                _log.warning(
                    "looptrace finding cleared %s (%s), was: %s",
                    finding.kind,
                    where,
                    finding.message,
                )
        self._active[snapshot.subtree] = now
