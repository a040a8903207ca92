"""Exemplars: per section path and histogram bucket, the latest traced span that fell in it.

A span processor on the tracer provider sees every traced section end (untraced ones make no
span, so no exemplar can point at a trace that does not exist). It keeps the latest span per
(path, bucket), and `take()` hands them to the cumulative histograms when the window that
counted them closes, so a bucket never shows an exemplar before its count includes it.
"""

from __future__ import annotations

import os
import threading
import weakref
from bisect import bisect_left
from collections.abc import Container
from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from looptrace._base.attributes import PATH
from looptrace._stats.buckets import BOUNDARIES_NS
from looptrace._stats.health import Incidents

_MAX_PATHS = 4096  # spans of other instrumentation must not grow memory without bound


@dataclass(frozen=True, slots=True)
class TraceExemplar:
    """One traced span: its ids, its duration in seconds and when it ended (epoch ns)."""

    trace_id: int
    span_id: int
    value: float
    time_ns: int

    @property
    def labels(self) -> dict[str, str]:
        """Return the exemplar labels Grafana links to a trace: `trace_id` and `span_id`."""
        return {"trace_id": f"{self.trace_id:032x}", "span_id": f"{self.span_id:016x}"}


Exemplars = dict[str, dict[int, TraceExemplar]]  # path -> bucket index -> latest exemplar


class ExemplarProcessor(SpanProcessor):
    """Keeps the latest ended span per (path, bucket) until `take()` collects it.

    The path is `looptrace.path`, else the span name, as the aggregating processor counts it.
    """

    def __init__(self, incidents: Incidents) -> None:
        self._incidents = incidents
        self._lock = threading.Lock()
        # path -> bucket index -> (trace id, span id, duration ns, end ns): plain tuples, as
        # this runs for every traced span.
        self._pending: dict[str, dict[int, tuple[int, int, int, int]]] = {}
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def renew() -> None:
                processor = ref()
                if processor is not None:
                    processor._lock = threading.Lock()
                    processor._pending = {}

            os.register_at_fork(after_in_child=renew)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Remember a sampled span as the exemplar of its path's bucket."""
        try:
            context = span.context
            start, end = span.start_time, span.end_time
            if context is None or start is None or end is None or not context.trace_flags.sampled:
                return
            path = (span.attributes or {}).get(PATH)
            if not isinstance(path, str):
                path = span.name
            duration = end - start
            latest = (context.trace_id, context.span_id, duration, end)
            index = bisect_left(BOUNDARIES_NS, duration)
            with self._lock:
                buckets = self._pending.get(path)
                if buckets is None:
                    if len(self._pending) >= _MAX_PATHS:
                        return
                    buckets = self._pending[path] = {}
                buckets[index] = latest
        except Exception:
            self._incidents.failed("ExemplarProcessor.on_end")

    def take(self, until_ns: int, paths: Container[str] | None = None) -> Exemplars:
        """Return and forget the exemplars of spans that ended by `until_ns` (epoch ns).

        With `paths`, only those paths' (the window of one timer's subtree).
        """
        taken: Exemplars = {}
        with self._lock:
            for path, buckets in list(self._pending.items()):
                if paths is not None and path not in paths:
                    continue
                due = {i: latest for i, latest in buckets.items() if latest[3] <= until_ns}
                if not due:
                    continue
                taken[path] = {
                    i: TraceExemplar(trace_id, span_id, duration / 1e9, end)
                    for i, (trace_id, span_id, duration, end) in due.items()
                }
                if len(due) == len(buckets):
                    del self._pending[path]
                else:
                    for index in due:
                        del buckets[index]
        return taken

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered here that a flush could deliver."""
        return True
