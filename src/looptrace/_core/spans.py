"""The end of a span of a timed interval: status, exception and end time, never raising."""

from __future__ import annotations

from typing import Final

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from looptrace._stats.health import Incidents

# The status description of a span that was still running when looptrace shut down.
CUT_STATUS: Final = "cut: still running at shutdown"


def end_span(
    span: trace.Span,
    end_ns: int,
    error: BaseException | None,
    incidents: Incidents,
    *,
    cut: bool = False,
) -> None:
    """End `span` at `end_ns` (epoch nanoseconds), ERROR with `error`, or ERROR "cut" if `cut`.

    A failing span processor is counted in `health()`, never raised into the user's loop.
    """
    try:
        if cut:
            span.set_status(Status(StatusCode.ERROR, CUT_STATUS))
        elif error is not None:
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.record_exception(error, timestamp=end_ns)
        span.end(end_time=end_ns)
    except Exception:
        incidents.failed("span end")
