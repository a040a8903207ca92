"""The export pipeline of one `Looptrace`: span processor, OTLP metrics push, Prometheus.

Built by `configure()` from resolved `ExportSettings`; it hooks into `Outputs` so every
window reaches the metric exporters at `reset()`, and `shutdown()` delivers what is pending
within the OTLP timeout. Nothing here runs the network on the training thread.
"""

from __future__ import annotations

import importlib
import os
import time
import weakref
from types import ModuleType
from typing import TYPE_CHECKING

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from looptrace._base.errors import ConfigError
from looptrace._distributed.ranks import RankInfo
from looptrace._export import sdk_logs
from looptrace._export.cumulative import CumulativeHistograms
from looptrace._export.exemplars import ExemplarProcessor
from looptrace._export.outputs import Outputs
from looptrace._export.settings import ExportOptions, ExportSettings, resolve
from looptrace._export.span_export import CountingSpanExporter, ExportingSpanProcessor, bounded
from looptrace._stats.health import Incidents
from looptrace._stats.snapshot import Snapshot

if TYPE_CHECKING:
    from looptrace._export.otlp import MetricPusher
    from looptrace._export.prometheus import PrometheusEndpoint


def export_pipeline(
    options: ExportOptions,
    *,
    owns_traces: bool,
    owns_metrics: bool,
    disabled: bool,
    resource: Resource,
    rank: RankInfo,
    incidents: Incidents,
    outputs: Outputs,
) -> ExportPipeline | None:
    """Resolve the exporters and build their pipeline, hooked into `outputs`; None if none.

    Raises:
        ConfigError: a setting that cannot be used, before anything is started.

    """
    settings = resolve(
        options,
        owns_traces=owns_traces and not disabled,
        owns_metrics=owns_metrics,
        local_rank=rank.local_rank,
    )
    if disabled or not settings.any:
        return None
    pipeline = ExportPipeline(
        settings, resource=resource, attributes=rank.span_attributes(), incidents=incidents
    )
    pipeline.install(outputs)
    return pipeline


class ExportPipeline:
    """Exporters of one `Looptrace`, with a bounded flush and shutdown."""

    def __init__(
        self,
        settings: ExportSettings,
        *,
        resource: Resource,
        attributes: dict[str, int],
        incidents: Incidents,
    ) -> None:
        self.settings = settings
        self.incidents = incidents
        self.histograms = CumulativeHistograms(
            resource, attributes, incidents, ExemplarProcessor(incidents), settings.histogram
        )
        self.processor: ExportingSpanProcessor | None = None
        self.pusher: MetricPusher | None = None
        self.prometheus: PrometheusEndpoint | None = None
        self._forked = False
        self._closed = False
        try:
            if settings.traces is not None:
                otlp = _extra("otlp", "OTLP trace export")
                exporter = CountingSpanExporter(otlp.span_exporter(settings.traces), incidents)
                self.processor = ExportingSpanProcessor(
                    exporter, settings.batch, incidents, settings.traces.timeout_s
                )
            if settings.metrics is not None:
                otlp = _extra("otlp", "OTLP metric export")
                self.pusher = otlp.MetricPusher(
                    otlp.metric_exporter(settings.metrics),
                    self.histograms.metrics_data,
                    incidents,
                    settings.metrics.timeout_s,
                )
            if settings.prometheus is not None:
                prometheus = _extra("prometheus", settings.prometheus.source)
                self.prometheus = prometheus.PrometheusEndpoint(
                    settings.prometheus, self.histograms
                )
        except BaseException:
            self._release()
            raise
        sdk_logs.fold(
            value
            for otlp_settings in (settings.traces, settings.metrics)
            if otlp_settings is not None
            for value in otlp_settings.headers.values()
        )
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def after_fork() -> None:
                pipeline = ref()
                if pipeline is not None:
                    pipeline.after_fork_in_child()

            os.register_at_fork(after_in_child=after_fork)

    def attach(self, provider: SdkTracerProvider | None) -> None:
        """Add the span processors to the tracer provider looptrace uses."""
        if provider is None:
            return
        if self.histograms.exemplars is not None:
            provider.add_span_processor(self.histograms.exemplars)
        if self.processor is not None:
            provider.add_span_processor(self.processor)
        if self.settings.console_traces:
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))

    def install(self, outputs: Outputs) -> None:
        """Connect the pipeline to the outputs of a `Looptrace`.

        Its shutdown goes first, so the spans it exports are flushed within its bound before
        anything else asks the provider to flush.
        """
        outputs.on_reset.append(self.on_reset)
        outputs.on_shutdown.insert(0, self.shutdown)

    def on_reset(self, snapshot: Snapshot) -> None:
        """Queue a window for the totals and ask for a push; constant work, returns at once."""
        if self._forked:
            return
        self.histograms.add(snapshot)
        if self.pusher is not None:
            self.pusher.request()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Deliver queued spans and push the current totals, waiting at most `timeout_s`."""
        if self._forked or self._closed:
            return True
        limit = self.settings.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        ticket = self.pusher.request() if self.pusher is not None else 0
        ok = True
        if self.processor is not None:
            ok = self.processor.force_flush(int(limit * 1e3))
        if self.pusher is not None:
            ok = self.pusher.wait(ticket, max(0.0, deadline - time.monotonic())) and ok
        return ok

    def shutdown(self) -> None:
        """Deliver what is pending within the OTLP timeout, then release every exporter.

        The last window was added by the `reset()` that `Looptrace.shutdown()` makes first.
        Spans still undelivered at the bound are counted as dropped.
        """
        if self._closed:
            return
        self._closed = True
        limit = self.settings.timeout_s
        deadline = time.monotonic() + limit
        # A forked child shares the parent's endpoint and pushes nothing: it only has spans.
        pusher = None if self._forked else self.pusher
        prometheus = None if self._forked else self.prometheus
        ticket = pusher.request() if pusher is not None else 0

        def close_all() -> None:
            if prometheus is not None:
                prometheus.close()
            if self.processor is not None:
                self.processor.shutdown()
            if pusher is not None:
                if not pusher.wait(ticket, max(0.0, deadline - time.monotonic())):
                    pusher.give_up(ticket)
                pusher.close()

        finished = bounded(close_all, limit, self.incidents, "export shutdown")
        self.histograms.close()
        sdk_logs.release()  # records logged by exporters still in flight pass unfolded
        if not finished:  # the process may exit under what is still in flight: count it lost
            if self.processor is not None:
                self.processor.counting.settle(self.processor.accepted)
            if pusher is not None:
                pusher.give_up(ticket)

    def after_fork_in_child(self) -> None:
        """Stop metrics in a forked child; its spans still go (the SDK restarts its worker)."""
        self._forked = True
        if self.pusher is not None:
            self.pusher.after_fork_in_child()

    def _release(self) -> None:
        if self.processor is not None:
            self.processor.shutdown()
        if self.pusher is not None:
            self.pusher.close()
        if self.prometheus is not None:
            self.prometheus.close()


def _extra(name: str, setting: str) -> ModuleType:
    """Import the module of an optional exporter, or name the extra that installs it."""
    try:
        return importlib.import_module(f"looptrace._export.{name}")
    except ImportError as error:
        raise ConfigError(
            f"{setting}: this exporter needs the '{name}' extra: pip install 'looptrace[{name}]' "
            f"({error})"
        ) from None
