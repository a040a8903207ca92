"""The span processor of the span file: every sampled span is written, off the training thread.

A file is local, so unlike the network exporters it keeps every span: the training thread only
appends a finished span to a list, and a writer thread of its own encodes and writes batches.
When the writer falls behind by `BACKLOG` spans, the training thread waits for it (at most
`STALL_S`, for a stalled filesystem) instead of dropping spans; spans are lost only when the
file cannot be written, and then they are counted and recorded in the file.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import Protocol

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExportResult

BATCH = 512  # spans per line at most
DELAY_S = 0.2  # a span waits this long at most for its batch to fill
BACKLOG = 65_536  # spans waiting to be written before the training thread waits
STALL_S = 10.0  # how long the training thread waits for a stalled writer before counting a loss


class SpanWriter(Protocol):
    """Writes one batch as a line; counts spans lost before they reached it."""

    def export(self, spans: list[ReadableSpan]) -> SpanExportResult:
        """Write `spans`; a failure is counted by the writer."""
        ...

    def lost(self, spans: int) -> None:
        """Count spans that never reached `export()`."""
        ...

    def shutdown(self) -> None:
        """Record what was lost and close the file."""
        ...


class SpanFileProcessor(SpanProcessor):
    """Queues sampled spans for the span file and writes them from a thread of its own."""

    def __init__(self, writer: SpanWriter) -> None:
        self._writer = writer
        self._cond = threading.Condition()
        self._pending: list[ReadableSpan] = []
        self._busy = 0  # spans taken by the writer thread and not yet written
        self._flushes = 0  # flush requests, so the writer does not wait for a full batch
        self._closed = False
        self._stalled = False
        self._thread: threading.Thread | None = None
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (method := ref()) and method())

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Queue a sampled span; wait for the writer when it is `BACKLOG` spans behind."""
        if not (span.context and span.context.trace_flags.sampled):
            return
        with self._cond:
            if self._closed:
                self._writer.lost(1)
                return
            if len(self._pending) >= BACKLOG and (
                self._stalled
                or not self._cond.wait_for(
                    lambda: len(self._pending) < BACKLOG or self._closed, STALL_S
                )
            ):
                self._stalled = True  # later spans do not wait until the writer moves again
                self._writer.lost(1)
                return
            self._pending.append(span)
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="looptrace-span-file", daemon=True)
                with contextlib.suppress(RuntimeError):  # at interpreter shutdown: see shutdown()
                    thread.start()
                    self._thread = thread
            if len(self._pending) == BATCH:
                self._cond.notify_all()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Write every queued span; return whether that finished within the timeout."""
        with self._cond:
            self._flushes += 1
            self._cond.notify_all()
            return self._cond.wait_for(
                lambda: (not self._pending and not self._busy) or self._thread is None,
                timeout_millis / 1e3,
            )

    def shutdown(self) -> None:
        """Write what is queued (within `STALL_S`), then count the rest as lost and close."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(STALL_S)
        else:  # no writer thread could be started (interpreter shutdown): write here
            self._run()
        with self._cond:
            left = len(self._pending)
            self._pending = []
        if left:
            self._writer.lost(left)
        self._writer.shutdown()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: len(self._pending) >= BATCH or self._flushes or self._closed,
                    DELAY_S,
                )
                batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
                self._busy = len(batch)
                self._stalled = False
                if not self._pending:
                    self._flushes = 0
                self._cond.notify_all()  # a training thread waiting for room
                if not batch and self._closed:
                    return
            if batch:
                try:
                    self._writer.export(batch)
                except Exception:  # the writer counts its own failures; never kill this thread
                    self._writer.lost(len(batch))
            with self._cond:
                self._busy = 0
                self._cond.notify_all()

    def _after_fork_in_child(self) -> None:
        """Start afresh in a forked child: the parent's queue is the parent's to write."""
        self._cond = threading.Condition()
        self._pending = []
        self._busy = 0
        self._flushes = 0
        self._stalled = False
        self._thread = None
