"""`configure()`: choose providers without clobbering the application's, and wire looptrace."""

from __future__ import annotations

import os
import socket
import weakref
from collections.abc import Callable, Mapping

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.resources import HOST_NAME, SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

from looptrace._core.clock import Clock, MonotonicClock
from looptrace._core.device import CudaEventClock, DeviceClock, SyncedClock
from looptrace._core.engine import Engine
from looptrace._core.ids import StepTraces
from looptrace._core.sampling import LapSampler
from looptrace._distributed.ranks import RankInfo
from looptrace._export.app_metrics import ReaderHooks
from looptrace._export.exit import install_exit_flush
from looptrace._export.exporters import ExportPipeline, export_pipeline
from looptrace._export.files import FLUSH_TIMEOUT_S, FileOutputs, PathLike
from looptrace._export.id_generator import StepIdGenerator
from looptrace._export.outputs import Outputs
from looptrace._export.processor import SCOPE, AggregatingSpanProcessor
from looptrace._export.settings import ExportOptions, SlowLapFactor
from looptrace._export.settings import slow_lap_factor as slow_lap_factor_of
from looptrace._looptrace import Looptrace
from looptrace._stats.aggregator import Aggregator
from looptrace._stats.errors import ConfigError
from looptrace._stats.health import Incidents
from looptrace._stats.version import version


def configure(
    service_name: str | None = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    clock: Clock | None = None,
    trace_every: int | None = None,
    trace_first: int | None = None,
    rank: RankInfo | None = None,
    run_id: str | None = None,
    max_paths: int = 1000,
    trace_file: PathLike | None = None,
    snapshot_file: PathLike | None = None,
    device_clock: DeviceClock | None = None,
    device_sync: bool = False,
    otlp_endpoint: str | None = None,
    otlp_protocol: str | None = None,
    otlp_headers: Mapping[str, str] | str | None = None,
    otlp_certificate: str | None = None,
    otlp_client_certificate: str | None = None,
    otlp_client_key: str | None = None,
    otlp_insecure: bool | None = None,
    otlp_timeout: float | None = None,
    otlp_compression: str | None = None,
    traces_exporter: str | None = None,
    metrics_exporter: str | None = None,
    prometheus: str | int | bool | None = None,
    slow_lap_factor: SlowLapFactor = "auto",
) -> Looptrace:
    """Set up looptrace and return the handle that makes timers and resets windows.

    Args:
        service_name: `service.name` of the Resource; falls back to `OTEL_SERVICE_NAME`,
            then `"looptrace"`.
        tracer_provider: where spans go. Without one, a global SDK provider set by the
            application is used (looptrace adds its processor to it); without that either,
            looptrace makes an SDK provider of its own, the global one if none is set yet.
            Each `configure()` call is separate: a second one (with or without `shutdown()`
            of the first) gets its own Resource, outputs and processors, never the first's.
        meter_provider: an SDK MeterProvider whose readers also collect looptrace's
            metrics (pre-aggregated, flushed at each `reset()`); defaults to the global
            provider when that is an SDK one.
        clock: the time source (default: `time.perf_counter_ns` with one `time_ns` anchor);
            tests pass `looptrace.testing.FakeClock()`.
        trace_every: trace the outermost laps (steps) whose index is a multiple of this;
            1 traces every step, 0 none. Every section is aggregated either way.
        trace_first: also trace the first this many steps. Without either argument the
            policy comes from `OTEL_TRACES_SAMPLER`, else the first 10 steps and every 100th
            (see `LapSampler`); `trace_every` alone means exactly that (`trace_first=0`).
        rank: override the rank detected from the launcher's environment.
        run_id: identifies the run for trace ids shared by all ranks (one trace per step);
            falls back to `LOOPTRACE_RUN_ID`, then the launcher's job id (torchrun's
            `TORCHELASTIC_RUN_ID`, Slurm's `SLURM_JOB_ID.SLURM_STEP_ID`, Open MPI's job id).
            Without any, every lap gets random ids.
        max_paths: distinct section paths kept apart; later ones count under `"other"`.
        trace_file: also append spans to this file as OTLP/JSON lines (one export batch per
            line; needs the `files` extra); falls back to `LOOPTRACE_TRACE_FILE`. A `{rank}`
            placeholder is replaced by the rank; without one, jobs of several processes get
            `.rank<N>` before the suffix. Spans of other instrumentation on the same provider
            are written too.
        snapshot_file: append every `reset()` window's statistics to this file as one JSON
            line (step, time, rank, per-path statistics); falls back to
            `LOOPTRACE_SNAPSHOT_FILE`; named per rank like `trace_file`.
        device_clock: the events device timers use (default: CUDA events through torch,
            made when the first device timer starts); tests pass
            `looptrace.testing.FakeDeviceClock()`.
        device_sync: wait for the device at every timer call and time everything on the
            host clock: host-aligned numbers, at the cost of a synchronize per boundary.
        otlp_endpoint: OTLP receiver URL (`http://collector:4318`, or `:4317` with gRPC);
            turns OTLP export of traces and metrics on.
        otlp_protocol: `"http/protobuf"` (default) or `"grpc"`.
        otlp_headers: headers for every export, a dict or `"key=value,..."`.
        otlp_certificate: PEM file of the CA that signed the receiver's certificate.
        otlp_client_certificate: PEM client certificate, for mutual TLS.
        otlp_client_key: PEM key of the client certificate.
        otlp_insecure: gRPC only: True for plaintext, False for TLS (default: from the
            scheme, `http://` plaintext).
        otlp_timeout: seconds one export may take; also the bound on `shutdown()`.
        otlp_compression: `"gzip"`, `"deflate"` (HTTP) or `"none"`.
        traces_exporter: `"otlp"`, `"console"`, `"none"` (as `OTEL_TRACES_EXPORTER`).
        metrics_exporter: `"otlp"`, `"prometheus"`, `"none"` (as `OTEL_METRICS_EXPORTER`).
        prometheus: serve `/metrics` for Prometheus at `"host:port"` or a port (host
            127.0.0.1; the local rank is added to the port), True for the default 9464.
        slow_lap_factor: trace an untraced step in full when it takes more than this many
            times the recent median of its timer (default 3; see the README, "Finding a
            straggler"); `None` or `"off"` turns it off; `"auto"` (the default) reads
            `LOOPTRACE_SLOW_LAP_FACTOR`.

    Each exporter argument falls back to its standard `OTEL_*` variable (see the README).
    Environment variables turn exporters on only for the providers looptrace creates itself.

    Raises:
        ConfigError: a setting, passed or from the environment, that cannot be used.

    """
    sampler = LapSampler.resolve(trace_every, trace_first)
    slow_factor = slow_lap_factor_of(slow_lap_factor)
    if isinstance(max_paths, bool) or not isinstance(max_paths, int) or not 1 <= max_paths <= 10**6:
        raise ConfigError(f"max_paths must be at least 1 and at most 1000000, got {max_paths!r}")
    rank = RankInfo.from_env() if rank is None else rank
    name = service_name or os.environ.get("OTEL_SERVICE_NAME") or "looptrace"
    incidents = Incidents()
    outputs = Outputs()
    disabled = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    resource = looptrace_resource(name, rank)

    meter_provider = meter_provider or _global_sdk_meter_provider()
    options = ExportOptions(
        otlp_endpoint=otlp_endpoint,
        otlp_protocol=otlp_protocol,
        otlp_headers=otlp_headers,
        otlp_certificate=otlp_certificate,
        otlp_client_certificate=otlp_client_certificate,
        otlp_client_key=otlp_client_key,
        otlp_insecure=otlp_insecure,
        otlp_timeout=otlp_timeout,
        otlp_compression=otlp_compression,
        traces_exporter=traces_exporter,
        metrics_exporter=metrics_exporter,
        prometheus=prometheus,
    )
    readers = (
        ReaderHooks(meter_provider, incidents)
        if meter_provider is not None and not disabled
        else None
    )
    host_clock = clock or MonotonicClock()
    if device_sync:
        host_clock = SyncedClock(host_clock, device_clock or _cuda_clock("device_sync=True"))
    # Made last among what can fail, files then exporters (a listening port); a failure
    # releases what they opened and removes the files they created.
    files = FileOutputs(
        trace_file=trace_file,
        snapshot_file=snapshot_file,
        rank=rank,
        incidents=incidents,
        tracing=not disabled,
    )
    pipeline = _undo_files_on_failure(
        files,
        tracer_provider,
        lambda: export_pipeline(
            options,
            owns_traces=tracer_provider is None and _application_tracer_provider() is None,
            owns_metrics=meter_provider is None,
            disabled=disabled,
            resource=resource,
            rank=rank,
            incidents=incidents,
            outputs=outputs,
        ),
    )
    if readers:
        readers.attach(outputs, pipeline.histograms if pipeline else None, resource, rank)
    aggregator = Aggregator(max_paths=max_paths)

    tracer: trace.Tracer | None = None
    provider: trace.TracerProvider | None = None
    step_traces: StepTraces | None = None
    processor: AggregatingSpanProcessor | None = None
    if not disabled:
        provider = tracer_provider or _application_tracer_provider()
        if provider is None:
            provider = _own_tracer_provider(resource, rank)
        processor = AggregatingSpanProcessor(aggregator, incidents)
        if isinstance(provider, SdkTracerProvider):
            provider.add_span_processor(processor)
            if pipeline is not None:
                pipeline.attach(provider)
            # Spans are flushed at shutdown only: a flush at every reset() would block the
            # training thread on the exporters.
            outputs.on_shutdown.append(provider.force_flush)
        outputs.on_shutdown.append(processor.shutdown)
        tracer = provider.get_tracer(SCOPE, version())
        step_traces = _step_traces(provider, rank, run_id)

    engine = Engine(
        clock=host_clock,
        aggregator=aggregator,
        tracer=tracer,
        sampler=sampler,
        step_traces=step_traces,
        span_attributes=rank.span_attributes(),
        incidents=incidents,
        device_clock=None if device_sync else device_clock,
        slow_lap_factor=slow_factor,
    )
    if isinstance(provider, SdkTracerProvider) and processor is not None:
        engine.spans_read = _other_processors(provider, processor)
    if device_sync:
        engine.device.disable()  # every boundary is already host-aligned
    files.attach(provider, outputs, step=engine.steps_done)
    lt = Looptrace(
        engine=engine,
        aggregator=aggregator,
        incidents=incidents,
        rank=rank,
        outputs=outputs,
        processor=processor,
    )
    if pipeline is not None:
        install_exit_flush(lt, pipeline.flush, pipeline.settings.timeout_s, incidents)
    elif files.active:
        install_exit_flush(lt, files.flush, FLUSH_TIMEOUT_S, incidents)
    return lt


def _undo_files_on_failure(
    files: FileOutputs,
    tracer_provider: trace.TracerProvider | None,
    make: Callable[[], ExportPipeline | None],
) -> ExportPipeline | None:
    """Return `make()`; if it fails, close the files and remove the ones created, and raise."""
    try:
        files.check_provider(tracer_provider)
        return make()
    except BaseException:
        files.discard()
        raise


def looptrace_resource(service_name: str, rank: RankInfo) -> Resource:
    """Return the Resource of a provider looptrace installs: service, host and rank."""
    return Resource.create(
        {
            SERVICE_NAME: service_name,
            SERVICE_INSTANCE_ID: rank.instance_id,
            HOST_NAME: socket.gethostname(),
            **rank.attributes(),
        }
    )


def _cuda_clock(setting: str) -> CudaEventClock:
    try:
        return CudaEventClock()
    except Exception as error:
        raise ConfigError(f"{setting} needs a CUDA device: {error}") from None


def _step_traces(
    provider: trace.TracerProvider, rank: RankInfo, run_id: str | None
) -> StepTraces | None:
    """Shared step traces need a run id and a provider whose ids looptrace can pin."""
    run = run_id or os.environ.get("LOOPTRACE_RUN_ID") or rank.job_id
    generator = getattr(provider, "id_generator", None)
    if not run or not isinstance(generator, StepIdGenerator):
        return None
    return StepTraces(run, rank.rank, generator)


# Providers looptrace made: a later configure() makes its own rather than join one of them.
_INSTALLED: weakref.WeakSet[SdkTracerProvider] = weakref.WeakSet()


def _own_tracer_provider(resource: Resource, rank: RankInfo) -> SdkTracerProvider:
    """Make looptrace's provider; the first one made becomes the global provider."""
    # looptrace samples whole steps itself (LapSampler); the SDK keeps what it gets.
    provider = SdkTracerProvider(
        resource=resource, sampler=ParentBased(ALWAYS_ON), id_generator=StepIdGenerator()
    )
    _keep_instance_id_after_fork(provider, rank.instance_id)
    if _global_sdk_tracer_provider() is None:
        trace.set_tracer_provider(provider)
    _INSTALLED.add(provider)
    return provider


def _other_processors(
    provider: SdkTracerProvider, mine: AggregatingSpanProcessor
) -> Callable[[], bool]:
    """Return a test of whether `provider` has a span processor besides looptrace's own.

    Without one nothing reads looptrace's spans, so none is built. Processors added later
    (an exporter, a span file) count from the next lap on.
    """
    multi = getattr(provider, "_active_span_processor", None)
    if multi is None or not hasattr(multi, "_span_processors"):
        return lambda: True  # an SDK of unknown shape: assume someone reads

    def others() -> bool:
        found = multi._span_processors  # a tuple, replaced whenever one is added
        return len(found) > 1 or (len(found) == 1 and found[0] is not mine)

    return others


def _application_tracer_provider() -> SdkTracerProvider | None:
    """Return the global SDK provider when the application set it (not an earlier looptrace)."""
    provider = _global_sdk_tracer_provider()
    return None if provider is None or provider in _INSTALLED else provider


def _global_sdk_tracer_provider() -> SdkTracerProvider | None:
    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, SdkTracerProvider) else None


def _global_sdk_meter_provider() -> SdkMeterProvider | None:
    provider = metrics.get_meter_provider()
    return provider if isinstance(provider, SdkMeterProvider) else None


def _keep_instance_id_after_fork(provider: SdkTracerProvider, instance_id: str) -> None:
    """Re-apply looptrace's `service.instance.id` in forked children.

    The SDK replaces it with a random UUID after every fork (its process-dependent resource
    detector); a DataLoader worker must keep reporting as the job's rank that forked it.
    Handlers run in registration order, so this one runs after the provider's own.
    """
    if not hasattr(os, "register_at_fork"):
        return
    ref = weakref.ref(provider)
    pinned = Resource({SERVICE_INSTANCE_ID: instance_id})

    def reapply() -> None:
        target = ref()
        update = getattr(target, "_update_resource", None)
        if update is not None:
            update(pinned)

    os.register_at_fork(after_in_child=reapply)
