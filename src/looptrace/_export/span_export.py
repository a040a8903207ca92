"""Span export: the SDK's batch processor and OTLP exporters, with every lost span counted.

The training thread only appends a finished span to the batch queue; a worker thread of the
SDK exports it. When the queue is full the span is dropped and counted, without the SDK's
per-span warning (a log call per span would cost the training thread more than the section).
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from looptrace._export import sdk_logs
from looptrace._export.encodable import encodable_spans
from looptrace._export.settings import BatchSettings
from looptrace._stats.health import Incidents


class CountingSpanExporter(SpanExporter):
    """Passes batches to an exporter and counts the spans it failed to deliver."""

    def __init__(self, inner: SpanExporter, incidents: Incidents) -> None:
        self.inner = inner
        self._incidents = incidents
        self._lock = threading.Lock()
        self.delivered = 0
        self.failed = 0
        self.settled = False  # set once shutdown has counted what is still pending
        self.closing = False  # set when shutdown starts closing the wrapped exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export a batch; a failure or an exception counts every span of it as dropped.

        Text that cannot be encoded (a lone surrogate) is escaped in a copy of its span, so
        one odd name never fails the batch.

        An exporter shut down under a batch in flight (a gRPC channel closed by a shutdown that
        stopped waiting for a stalled collector) raises: those spans are lost as any undelivered
        ones are, not an internal error; so does a transport error (`OSError`, which `requests`'
        errors are) that an older SDK's HTTP exporter raises instead of returning a failure.
        """
        try:
            with sdk_logs.ours():
                result = self.inner.export(encodable_spans(spans))
        except OSError:  # a transport error the exporter let through (older SDKs' HTTP one)
            result = SpanExportResult.FAILURE
        except Exception:
            if not self.closing:
                self._incidents.failed(f"{type(self.inner).__name__}.export")
            result = SpanExportResult.FAILURE
        with self._lock:
            if self.settled:
                return result
            if result is SpanExportResult.SUCCESS:
                self.delivered += len(spans)
            else:
                self.failed += len(spans)
                self._incidents.dropped(len(spans))
        return result

    def shutdown(self) -> None:
        """Shut the wrapped exporter down."""
        self.closing = True
        with sdk_logs.ours():
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the wrapped exporter."""
        with sdk_logs.ours():
            return self.inner.force_flush(timeout_millis)

    def after_fork_in_child(self) -> None:
        """Start counting afresh, with a fresh lock, in a forked child."""
        self._lock = threading.Lock()
        self.delivered = self.failed = 0
        self.settled = self.closing = False

    def settle(self, accepted: int) -> int:
        """Count spans accepted for export but neither delivered nor failed; stop counting."""
        with self._lock:
            if self.settled:
                return 0
            self.settled = True
            lost = max(0, accepted - self.delivered - self.failed)
        self._incidents.dropped(lost)
        return lost


class ExportingSpanProcessor(BatchSpanProcessor):
    """A `BatchSpanProcessor` that counts spans it drops and bounds its flush and shutdown.

    `force_flush()` and `shutdown()` wait at most `timeout_s`; whatever is still pending after
    `shutdown()` is counted as dropped.
    """

    def __init__(
        self,
        exporter: CountingSpanExporter,
        batch: BatchSettings,
        incidents: Incidents,
        timeout_s: float,
    ) -> None:
        super().__init__(
            exporter,
            max_queue_size=batch.max_queue_size,
            schedule_delay_millis=batch.schedule_delay_ms,
            max_export_batch_size=batch.max_export_batch_size,
            export_timeout_millis=batch.export_timeout_ms,
        )
        self.counting = exporter
        self.timeout_s = timeout_s
        self.accepted = 0
        self.closed = False
        self._incidents = incidents
        self._lock = threading.Lock()
        self._queue_full = _queue_full_check(self, batch.max_queue_size)
        if hasattr(os, "register_at_fork"):
            reset = weakref.WeakMethod(self.after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (method := reset()) and method())

    def on_end(self, span: ReadableSpan) -> None:
        """Queue a sampled span, or count it as dropped when the queue is full or closed."""
        try:
            if not (span.context and span.context.trace_flags.sampled):
                return
            if self.closed or self._queue_full():
                self._incidents.dropped(1)
                return
            with self._lock:
                self.accepted += 1
            super().on_end(span)
        except Exception:
            self._incidents.failed("ExportingSpanProcessor.on_end")

    def force_flush(self, timeout_millis: int | None = None) -> bool:
        """Export what is queued, waiting at most the export timeout."""
        limit = (
            self.timeout_s if timeout_millis is None else min(self.timeout_s, timeout_millis / 1e3)
        )
        flush = super().force_flush
        return bounded(sdk_logs.as_ours(flush), limit, self._incidents, "span flush")

    def shutdown(self) -> None:
        """Export what is queued within the timeout, then count what was not delivered."""
        if self.closed:
            return
        self.closed = True
        inner = getattr(self, "_batch_processor", None)
        timeout_ms = int(self.timeout_s * 1e3)
        work: Callable[[], object] = super().shutdown  # an SDK without the batch processor
        if inner is not None:
            work = functools.partial(inner.shutdown, timeout_millis=timeout_ms)
        bounded(sdk_logs.as_ours(work), self.timeout_s, self._incidents, "span exporter shutdown")
        self.counting.settle(self.accepted)

    def after_fork_in_child(self) -> None:
        """Forget the parent's counts, with fresh locks; the SDK empties the child's queue."""
        self._lock = threading.Lock()
        self.accepted = 0
        self.counting.after_fork_in_child()


def bounded(work: Callable[[], object], timeout_s: float, incidents: Incidents, what: str) -> bool:
    """Run `work` on a daemon thread and wait at most `timeout_s`; return whether it finished.

    A stalled collector can block an exporter call for its whole timeout per batch; the
    caller (the training thread, `atexit`, a signal handler) waits for one bound only. Where
    no thread can be started (at interpreter shutdown, Python 3.12 and newer refuse to), the
    work runs on the caller's thread, bounded by the exporters' own timeouts only.
    """
    done = threading.Event()

    def run() -> None:
        try:
            work()
        except Exception:
            incidents.failed(what)
        finally:
            done.set()

    try:
        threading.Thread(target=run, name="looptrace-flush", daemon=True).start()
    except RuntimeError:  # "can't create new thread at interpreter shutdown"
        run()
    return done.wait(timeout_s)


def _queue_full_check(processor: BatchSpanProcessor, capacity: int) -> Callable[[], bool]:
    """Return a cheap test for a full queue, or one that is always False on an unknown SDK."""
    queue = getattr(getattr(processor, "_batch_processor", None), "_queue", None)
    if queue is None or not hasattr(queue, "__len__"):
        return lambda: False
    return lambda: len(queue) >= capacity
