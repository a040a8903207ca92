"""`LooptraceInstrumentor`: the OpenTelemetry instrumentor that `opentelemetry-instrument` loads.

Registered as the `looptrace` entry point of group `opentelemetry_instrumentor` (the
`instrument` extra), so `opentelemetry-instrument python train.py` times a PyTorch loop as
`looptrace run` does: `instrument()` configures looptrace from the environment (on the
tracer provider the distro set up) and patches torch; `uninstrument()` restores every patch.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

if TYPE_CHECKING:
    from looptrace.integrations.torch import Instrumented

__all__ = ["LooptraceInstrumentor"]


class LooptraceInstrumentor(BaseInstrumentor):
    """Times the data, forward, backward and optimizer steps of a PyTorch loop.

    `instrument(looptrace=lt)` uses a looptrace already configured; without it one is
    configured from the environment. `LOOPTRACE_INSTRUMENT` and `LOOPTRACE_RESET_EVERY`
    choose the parts and the windows.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        """Return the packages this instruments: torch."""
        return ("torch >= 2.1",)

    def _instrument(self, **kwargs: Any) -> None:
        from looptrace.integrations.auto import instrument_from_environment  # noqa: PLC0415

        self._handle: Instrumented | None = instrument_from_environment(kwargs.get("looptrace"))

    def _uninstrument(self, **kwargs: Any) -> None:
        handle: Instrumented | None = getattr(self, "_handle", None)
        if handle is not None:
            self._handle = None
            handle.uninstrument()
