"""The id generator that gives rank 0's lap spans the trace ids derived for their step."""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator


class StepIdGenerator(RandomIdGenerator):
    """Random ids, except for a span whose ids looptrace pinned just before starting it.

    A TracerProvider needs this generator for rank 0's lap spans to carry the derived ids;
    looptrace builds its own provider with it. Pass `id_generator=StepIdGenerator()` when
    building a provider yourself to get the same cross-rank traces.
    """

    def __init__(self) -> None:
        self._pinned = threading.local()

    def pin(self, trace_id: int, span_id: int) -> None:
        """Make the next root span started in this thread use these ids."""
        self._pinned.ids = (trace_id, span_id)

    def unpin(self) -> None:
        """Forget pinned ids that no span consumed (a disabled or non-recording tracer)."""
        self._pinned.ids = None

    def generate_trace_id(self) -> int:
        """Return the pinned trace id, else a random one."""
        ids: tuple[int, int] | None = getattr(self._pinned, "ids", None)
        return ids[0] if ids is not None else super().generate_trace_id()

    def generate_span_id(self) -> int:
        """Return the pinned span id (once), else a random one."""
        ids: tuple[int, int] | None = getattr(self._pinned, "ids", None)
        if ids is None:
            return super().generate_span_id()
        self._pinned.ids = None
        return ids[1]

    def is_trace_id_random(self) -> bool:
        """Return False for a pinned trace id: a hash, not random (W3C random-trace-id flag)."""
        return getattr(self._pinned, "ids", None) is None
