"""The span processor that folds finished spans of any instrumentation into the aggregates."""

from __future__ import annotations

import threading

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from looptrace._base.attributes import PATH
from looptrace._stats.aggregator import ENTRY_ITEMS, FOLD_AT, Adjustment, Aggregator
from looptrace._stats.health import Incidents

SCOPE = "looptrace"
_MAX_OPEN_PARENTS = 65_536


class AggregatingSpanProcessor(SpanProcessor):
    """Aggregates every ended span's duration per path (`looptrace.path`, else the span name).

    Self time is the duration minus that of the span's direct children, which end first.
    looptrace's own spans are skipped: its timers fold each section directly, with the exact
    split at `reset()` that a finished span no longer carries, so each section counts once.
    """

    def __init__(self, aggregator: Aggregator, incidents: Incidents) -> None:
        self._aggregator = aggregator
        self._incidents = incidents
        self._child_ns: dict[int, int] = {}
        # Spans ended since the last merge, as the timers log theirs (`ThreadState.log`).
        self._log: list[object] = []
        self._adjustments: list[Adjustment] = []
        self._lock = threading.Lock()
        self.enabled = True

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Fold a finished span of another instrumentation into the aggregates."""
        try:
            scope = span.instrumentation_scope
            if not self.enabled or (scope is not None and scope.name == SCOPE):
                return
            if span.start_time is None or span.end_time is None or span.context is None:
                return
            duration = span.end_time - span.start_time
            attributes = span.attributes or {}
            path = attributes.get(PATH)
            if not isinstance(path, str):
                path = span.name
            parent = span.parent
            with self._lock:
                children = self._child_ns.pop(span.context.span_id, 0)
                if parent is not None and not parent.is_remote:
                    if len(self._child_ns) >= _MAX_OPEN_PARENTS:
                        self._child_ns.clear()  # parents that never end must not grow memory
                    self._child_ns[parent.span_id] = (
                        self._child_ns.get(parent.span_id, 0) + duration
                    )
                log = self._log
                log.extend((path, duration, children))
                if span.status.status_code is StatusCode.ERROR:
                    self._adjustments.append((path, 0, 0, 1))
                full = len(log) >= FOLD_AT * ENTRY_ITEMS
            if full:
                with self._aggregator.lock:
                    self.merge_pending()
        except Exception:
            self._incidents.failed("AggregatingSpanProcessor.on_end")

    def merge_pending(self) -> None:
        """Merge the spans folded so far into the window; the caller holds its lock."""
        with self._lock:
            log, adjustments = self._log, self._adjustments
            self._log, self._adjustments = [], []
        self._aggregator.fold_log(log, adjustments)

    def after_fork_in_child(self) -> None:
        """Start empty with a fresh lock: another thread may have held it at fork."""
        self._lock = threading.Lock()
        self._child_ns = {}
        self._log, self._adjustments = [], []

    def shutdown(self) -> None:
        """Stop aggregating; the aggregator belongs to looptrace and outlives the provider."""
        self.enabled = False

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered here that a flush could deliver."""
        return True
