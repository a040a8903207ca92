"""The spans of laps and sections: which laps are traced, their parents, their start and end."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Status, StatusCode

from looptrace._base.attributes import PATH, STEP
from looptrace._core.clock import EpochAnchor
from looptrace._core.ids import StepTraces
from looptrace._core.sampling import LapSampler
from looptrace._stats.health import Incidents

if TYPE_CHECKING:
    from looptrace._core.intervals import Interval
    from looptrace._core.timer import Timer

# The status description of a span that was still running when looptrace shut down.
CUT_STATUS: Final = "cut: still running at shutdown"


class LapSpans:
    """Makes the spans of the engine's intervals; a failing processor never reaches the loop."""

    def __init__(
        self,
        tracer: trace.Tracer | None,
        sampler: LapSampler,
        *,
        step_traces: StepTraces | None,
        anchor: EpochAnchor,
        span_attributes: dict[str, int],
        incidents: Incidents,
    ) -> None:
        self.tracer = tracer
        self.sampler = sampler
        self.step_traces = step_traces
        self.anchor = anchor
        self.span_attributes = span_attributes
        self.incidents = incidents
        # What `spans_read()` watches: a provider's tuple of span processors (on `holder`,
        # replaced whenever one is added) and looptrace's own among them; None: assume read.
        self._holder: Any = None
        self._own: object = None
        self._bases: dict[Timer, dict[str, str | int]] = {}
        # Timer path -> an outermost lap traced whatever the sampler says (after a chronic
        # straggler was named, every rank's next step): replaced whole, never changed.
        self.forced: dict[str, int] = {}
        # The memory attributes of a traced lap as it ends (`MemoryReader.lap`; None: none).
        self.lap_memory: Callable[[], dict[str, int]] | None = None

    def watch(self, holder: object, own: object) -> None:
        """Read spans only while `holder._span_processors` has a processor besides `own`.

        Asked at every outermost lap, so a processor added later (an exporter, a span file)
        counts from the next lap on; compiled, the test is a few C operations.
        """
        self._holder, self._own = holder, own

    def spans_read(self) -> bool:
        """Whether anything besides looptrace's own processor reads spans."""
        holder = self._holder
        if holder is None:
            return True
        found = holder._span_processors
        return len(found) > 1 or (len(found) == 1 and found[0] is not self._own)

    def sampled(self, node: Timer, step: int) -> bool:
        """Whether outermost lap `step` of `node` is to be traced: sampled, or forced."""
        if self.sampler.traces(step):
            return True
        forced = self.forced
        return bool(forced) and forced.get(node.path) == step

    def force(self, laps: dict[str, int]) -> None:
        """Trace lap `laps[path]` of each outermost timer `path`, whatever the sampler says."""
        self.forced = {**self.forced, **laps}

    def traced(self, node: Timer, step: int) -> bool:
        """Whether outermost lap `step` of `node` gets spans: sampled, and something reads them."""
        return self.tracer is not None and self.sampled(node, step) and self.spans_read()

    def lap_context(self, node: Timer, step: int) -> Context | None:
        """Return the parent context of a traced outermost lap, None when it is not traced."""
        if not self.traced(node, step):
            return None
        if self.step_traces is None:
            return Context()
        return self.step_traces.context_for(node.path, step)

    def child_context(self, parent: Interval) -> Context | None:
        """Return the parent context of a section of a traced interval, else None."""
        if parent.span is not None:
            context = parent.context
            if context is None:
                context = parent.context = trace.set_span_in_context(parent.span, Context())
            return context
        if parent.device is not None and parent.device.span is not None:
            return _host_context(parent)
        if parent.implicit:  # a traced step of a never-lapped timer: its lap's own context
            return parent.context
        return None

    def start(
        self,
        node: Timer,
        context: Context,
        now: int,
        step: int,
        thread: dict[str, str | int] | None = None,
    ) -> trace.Span | None:
        """Start the span of an interval of `node` at monotonic `now`; None if that fails."""
        assert self.tracer is not None
        attributes = {**self.base(node), STEP: step}
        if thread is not None:
            attributes.update(thread)
        try:
            return self.tracer.start_span(
                node.name,
                context=context,
                attributes=attributes,
                start_time=self.anchor.epoch_ns(now),
                record_exception=False,
                set_status_on_exception=False,
            )
        except Exception:  # a failing processor must not break the loop: time it untraced
            self.incidents.failed("span start")
            return None

    def base(self, node: Timer) -> dict[str, str | int]:
        """Return the attributes every span of `node` carries: its path and the rank's."""
        base = self._bases.get(node)
        if base is None:
            base = self._bases[node] = {PATH: node.path, **self.span_attributes}
        return base

    def end(
        self, span: trace.Span, now: int, error: BaseException | None, *, cut: bool = False
    ) -> None:
        """End `span` at monotonic `now` (see `end_span`)."""
        end_span(span, self.anchor.epoch_ns(now), error, self.incidents, cut=cut)

    def memory(self) -> dict[str, int]:
        """Return the memory attributes of a lap ending now; never raises ({} on failure)."""
        read = self.lap_memory
        if read is None:
            return {}
        try:
            return read()
        except Exception:
            self.incidents.failed("reading a traced lap's memory")
            return {}

    def end_lap(
        self, span: trace.Span, now: int, error: BaseException | None, *, cut: bool = False
    ) -> None:
        """End the span of a traced outermost lap at `now`, with the memory at its end."""
        figures = self.memory()
        if figures:
            try:
                span.set_attributes(figures)
            except Exception:
                self.incidents.failed("span attributes")
        self.end(span, now, error, cut=cut)


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


def _host_context(interval: Interval) -> Context:
    """Return the span context of the nearest host-traced ancestor (device spans wait)."""
    found: Interval | None = interval
    while found is not None and found.span is None:
        found = found.parent
    if found is None or found.span is None:
        return Context()
    if found.context is None:
        found.context = trace.set_span_in_context(found.span, Context())
    return found.context
