"""Tracing for one `configure()`: looptrace's processor, tracer and step ids on a provider."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

from looptrace._base.version import version
from looptrace._configure.providers import tracer_provider_for
from looptrace._core.ids import StepTraces
from looptrace._distributed.ranks import RankInfo
from looptrace._export.exporters import ExportPipeline
from looptrace._export.id_generator import StepIdGenerator
from looptrace._export.outputs import Outputs
from looptrace._export.processor import SCOPE, AggregatingSpanProcessor
from looptrace._stats.aggregator import Aggregator
from looptrace._stats.health import Incidents


@dataclass(frozen=True)
class Tracing:
    """Where looptrace's spans go; all None when tracing is off (`OTEL_SDK_DISABLED`)."""

    provider: trace.TracerProvider | None = None
    tracer: trace.Tracer | None = None
    processor: AggregatingSpanProcessor | None = None
    step_traces: StepTraces | None = None

    def span_processors(self) -> tuple[object, object] | None:
        """Return what the engine watches to know whether anyone reads spans (`LapSpans.watch`).

        The SDK provider's holder of span processors and looptrace's own processor; None (an
        SDK of unknown shape, or another provider) keeps the engine's default: spans are read.
        """
        if not isinstance(self.provider, SdkTracerProvider) or self.processor is None:
            return None
        holder = getattr(self.provider, "_active_span_processor", None)
        if holder is None or not hasattr(holder, "_span_processors"):
            return None
        return holder, self.processor


@dataclass(frozen=True)
class TracingSources:
    """What tracing is built from: the caller's provider and the rest of `configure()`."""

    tracer_provider: trace.TracerProvider | None
    resource: Resource
    rank: RankInfo
    run_id: str | None
    incidents: Incidents
    outputs: Outputs


def wire_tracing(
    sources: TracingSources, aggregator: Aggregator, pipeline: ExportPipeline | None
) -> Tracing:
    """Add looptrace's processor (and the exporters) to the provider and take a tracer from it.

    Spans are flushed at shutdown only: a flush at every `reset()` would block the training
    thread on the exporters.
    """
    provider = tracer_provider_for(sources.tracer_provider, sources.resource, sources.rank)
    processor = AggregatingSpanProcessor(aggregator, sources.incidents)
    outputs = sources.outputs
    if isinstance(provider, SdkTracerProvider):
        provider.add_span_processor(processor)
        if pipeline is not None:
            pipeline.attach(provider)
        outputs.on_shutdown.append(provider.force_flush)
    outputs.on_shutdown.append(processor.shutdown)
    return Tracing(
        provider=provider,
        tracer=provider.get_tracer(SCOPE, version()),
        processor=processor,
        step_traces=_step_traces(provider, sources.rank, sources.run_id),
    )


def _step_traces(
    provider: trace.TracerProvider, rank: RankInfo, run_id: str | None
) -> StepTraces | None:
    """Shared step traces need a run id and a provider whose ids looptrace can pin."""
    run = run_id or rank.job_id
    generator = getattr(provider, "id_generator", None)
    if not run or not isinstance(generator, StepIdGenerator):
        return None
    return StepTraces(run, rank.rank, generator)
