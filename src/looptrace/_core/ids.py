"""Trace ids shared by every rank: one trace per step, derived, with no communication.

The trace id and the root span id of step N of a root timer are a hash of (run id, timer
path, N). Rank 0's lap span gets exactly those ids, so it is the root; every other rank's lap
span names it as a remote parent. Jaeger and Tempo then show one tree per step with every
rank's spans side by side, and a straggler stands out.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags


def step_ids(run_id: str, path: str, lap: int) -> tuple[int, int]:
    """Return the (trace id, root span id) of lap `lap` of the timer at `path` in a run."""
    digest = hashlib.blake2b(f"{run_id}\0{path}\0{lap}".encode(), digest_size=24).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1  # zero is the invalid id
    span_id = int.from_bytes(digest[16:], "big") or 1
    return trace_id, span_id


class IdPinner(Protocol):
    """An id generator that can be told the ids of the next root span (`StepIdGenerator`)."""

    def pin(self, trace_id: int, span_id: int) -> None:
        """Make the next root span started in this thread use these ids."""

    def unpin(self) -> None:
        """Forget pinned ids that no span consumed."""


class StepTraces:
    """Parent contexts for outermost laps so that all ranks' laps of a step share one trace."""

    def __init__(self, run_id: str, rank: int, generator: IdPinner) -> None:
        self.run_id = run_id
        self.rank = rank
        self._generator = generator
        self._main = threading.main_thread()

    def done(self) -> None:
        """Call after starting the lap span: drop ids the tracer did not use."""
        if self.rank == 0:
            self._generator.unpin()

    def context_for(self, path: str, lap: int) -> Context:
        """Return the parent context of a lap span (pinning rank 0's ids first).

        Only the main thread's laps are aligned across ranks; other threads get new traces.
        """
        if threading.current_thread() is not self._main:
            return Context()
        trace_id, span_id = step_ids(self.run_id, path, lap)
        if self.rank == 0:
            self._generator.pin(trace_id, span_id)
            return Context()
        parent = SpanContext(
            trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
        )
        return trace.set_span_in_context(NonRecordingSpan(parent), Context())
