"""`configure()` step by step: settings, clocks, outputs, tracing, the engine, the handle."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from opentelemetry import metrics, trace

from looptrace._base.errors import ConfigError
from looptrace._configure.hang_watchdog import serve_open_gauges, start_watchdog
from looptrace._configure.interpreter import check_interpreter
from looptrace._configure.providers import global_sdk_meter_provider, looptrace_resource
from looptrace._configure.sinks import Sinks, open_sinks
from looptrace._configure.tracing import Tracing, TracingSources, wire_tracing
from looptrace._core.clock import Clock, MonotonicClock
from looptrace._core.device import CudaEventClock, DeviceClock, SyncedClock
from looptrace._core.engine import Engine
from looptrace._distributed.ranks import RankInfo
from looptrace._export.app_metrics import ReaderHooks
from looptrace._export.exit import install_exit_flush
from looptrace._export.files import PathLike
from looptrace._export.findings_log import FindingsLog
from looptrace._export.outputs import Outputs
from looptrace._export.run_settings import RunSettings, resolve_run
from looptrace._export.run_settings import scale as scale_of
from looptrace._export.settings import ExportOptions, SlowLapFactor, diagnose_mode, histogram_kind
from looptrace._export.settings import hang_after as hang_after_of
from looptrace._export.settings import hang_factor as hang_factor_of
from looptrace._export.settings import slow_lap_factor as slow_lap_factor_of
from looptrace._looptrace import Looptrace
from looptrace._stats.aggregator import Aggregator
from looptrace._stats.health import Incidents
from looptrace._stats.memory import MemoryReader
from looptrace._stats.rates import flops_setting
from looptrace._stats.roles import roles_of
from looptrace._stats.thresholds import thresholds

MAX_PATHS_HIGH = 10**6


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
    histogram: str | None = None,
    roles: Mapping[str, Iterable[str] | str] | None = None,
    wait_sections: Iterable[str] = (),
    diagnosis_thresholds: Mapping[str, float] | None = None,
    device_memory: bool | None = None,
    diagnose: str | None = None,
    detail_ranks: int | str | None = None,
    job_rank: int | None = None,
    peak_flops: float | None = None,
    flops_per_unit: Mapping[str, float] | None = None,
    hang_after: float | None = None,
    hang_factor: float | None = None,
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
            times the recent median of its timer (default 3; see "Slow steps" on the
            docs' Tracing page); `None` or `"off"` turns it off; `"auto"` (the default) reads
            `LOOPTRACE_SLOW_LAP_FACTOR`.
        histogram: how OTLP metrics carry section durations: `"explicit"` buckets (five per
            decade) or `"exponential"` base-2 buckets at scale 7, within 1 %, for backends
            with native histograms; None (the default) reads `LOOPTRACE_HISTOGRAM`.
        roles: section names per role (`"data"`, `"wait"`, `"evaluation"`,
            `"checkpoint"`), for the diagnosis; `iterate()`'s fetch is `"data"` already, and
            sections named exactly `eval`, `evaluate`, `evaluation`, `val`, `validation`
            are evaluation, `checkpoint`, `ckpt`, `save_checkpoint` checkpoint, unless that
            role is given here (its names replace them; `[]`: none). Any other name given no
            role has none: it is never guessed.
        wait_sections: names of sections where ranks wait for each other (DDP's all-reduce
            inside `"backward"`): the cross-rank straggler is the rank with the least time
            in them, the rank the others wait for.
        diagnosis_thresholds: thresholds of `Snapshot.diagnosis()` by name, replacing the
            defaults of its table (see the README).
        device_memory: read the CUDA allocator's peaks, retries and OOMs at each window's
            close (`Snapshot.memory`) and reset the peak for the next window. The reset is
            process-wide: with None (the default) looptrace does it only when no other
            looptrace in the process does; True does it even so; False reads no device
            figure (pass it when your code or another tool resets the peak itself).
        diagnose: `"log"` logs each finding of the diagnosis (warning or worse) to the
            `looptrace` logger once when it appears and once when it clears, at each
            window's close (off the training thread); `"off"` does not; None (the default)
            reads `LOOPTRACE_DIAGNOSE`.
        detail_ranks: with `reset(across_ranks=True)`, how many of the slowest ranks of each
            window serve their full per-section metrics (with the window's straggler and any
            chronic straggler); the other ranks serve a few series each (their steps, the
            steps' p50 and p99, their lap time outside wait sections, the units counted).
            `"all"` keeps every rank's full detail. Falls back to `LOOPTRACE_DETAIL_RANKS`,
            then 8. Without `across_ranks` every rank serves its full detail.
        job_rank: the rank that serves and pushes the job's histograms (every rank's summed
            in the cross-rank reduce) and straggler, without a rank label; falls back to
            `LOOPTRACE_JOB_RANK`, then 0.
        peak_flops: the peak FLOP/s of the device this process trains on, from its data
            sheet for the precision you train in (an H100 SXM: 989e12 dense BF16). With the
            FLOPs of what a timer counts, each rate gets its MFU (`Rate.mfu`); without it
            none does. Never guessed from the device's name.
        flops_per_unit: FLOPs per unit counted, by unit name (`{"tokens": 6 * n_params}`),
            for every timer; `count(..., flops_per_unit=...)` overrides it per count. A
            unit with no known FLOPs gets no MFU.
        hang_after: seconds an open step must last, at least, before the watchdog reports it
            hung (the threshold's floor; 0 turns the watchdog off); None (the default) reads
            `LOOPTRACE_HANG_AFTER`, else 60; with a `clock` passed (a fake clock does not move
            with the watchdog's wake-ups) the watchdog runs only when this is passed. See the
            docs' Reliability page.
        hang_factor: a step is hung past this many times its timer's recent step time (and
            `hang_after`); None (the default) reads `LOOPTRACE_HANG_FACTOR`, else 10.

    Each exporter argument falls back to its standard `OTEL_*` variable (see the docs'
    Configuration page, docs/configuration.md).
    Environment variables turn exporters on only for the providers looptrace creates itself.

    Raises:
        ConfigError: a setting, passed or from the environment, that cannot be used.

    """
    check_interpreter()  # a free-threaded Python without the GIL: refused before anything else
    try:
        answers = roles_of(roles, wait_sections), thresholds(diagnosis_thresholds)
        flops = flops_setting(peak_flops, flops_per_unit)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    settings = resolve_run(
        service_name=service_name,
        trace_every=trace_every,
        trace_first=trace_first,
        run_id=run_id,
        trace_file=trace_file,
        snapshot_file=snapshot_file,
    )
    slow_factor = slow_lap_factor_of(slow_lap_factor)
    kind = histogram_kind(histogram)
    diagnose_to = diagnose_mode(diagnose)
    hang = hang_after_of(hang_after), hang_factor_of(hang_factor)
    _check_max_paths(max_paths)
    if device_memory is not None and not isinstance(device_memory, bool):
        raise ConfigError(f"device_memory must be True, False or None, got {device_memory!r}")
    if rank is not None and not isinstance(rank, RankInfo):
        raise ConfigError(
            f"rank must be a looptrace.RankInfo (RankInfo(rank=3, world_size=8)), or None to "
            f"read it from the launcher's environment; got {type(rank).__name__} {rank!r}"
        )
    rank = RankInfo.from_env() if rank is None else rank
    at_scale = scale_of(detail_ranks, job_rank, rank.world_size)
    incidents, outputs = Incidents(), Outputs()
    resource = looptrace_resource(settings.service_name, rank)
    meter_provider = meter_provider or global_sdk_meter_provider()
    readers = _reader_hooks(meter_provider, settings, incidents)
    clocks = _clocks(clock, device_clock, device_sync=device_sync)
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
        histogram=kind,
    )
    sources = TracingSources(tracer_provider, resource, rank, settings.run_id, incidents, outputs)
    sinks = open_sinks(settings, options, sources, owns_metrics=meter_provider is None)
    if readers:
        pipeline = sinks.pipeline
        readers.attach(
            outputs, pipeline.histograms if pipeline else None, resource, rank, histogram=kind
        )
    aggregator = Aggregator(max_paths=max_paths)
    # The exponential buckets are built from each window's durations, read when the totals
    # fold it (off the training thread); only then do windows keep them past their statistics.
    aggregator.keep_distributions = kind == "exponential" and (
        sinks.pipeline is not None or bool(readers)
    )
    tracing = Tracing() if settings.disabled else wire_tracing(sources, aggregator, sinks.pipeline)
    engine = _engine(
        settings=settings,
        clocks=clocks,
        aggregator=aggregator,
        tracing=tracing,
        rank=rank,
        incidents=incidents,
        slow_lap_factor=slow_factor,
    )
    sinks.files.attach(tracing.provider, outputs)
    lt = _handle(
        engine=engine,
        aggregator=aggregator,
        tracing=tracing,
        sinks=sinks,
        rank=rank,
        incidents=incidents,
        outputs=outputs,
        memory=MemoryReader(device_memory),
    )
    lt.roles, lt.limits = answers
    lt.flops = flops
    if diagnose_to == "log":
        findings_log = FindingsLog(incidents)
        outputs.on_reset.append(findings_log)
        outputs.on_shutdown.append(findings_log.close)
    lt.scale = at_scale
    push = serve_open_gauges(lt, sinks)
    start_watchdog(
        lt,
        sinks=sinks,
        rank=rank,
        incidents=incidents,
        outputs=outputs,
        after_s=hang[0] if clock is None or hang_after is not None else 0.0,
        factor=hang[1],
        real_clock=clock is None or isinstance(clock, MonotonicClock),
        push=push,
    )
    return lt


def _check_max_paths(max_paths: int) -> None:
    if (
        isinstance(max_paths, bool)
        or not isinstance(max_paths, int)
        or not 1 <= max_paths <= MAX_PATHS_HIGH
    ):
        raise ConfigError(
            f"max_paths must be at least 1 and at most {MAX_PATHS_HIGH}, got {max_paths!r}"
        )


def _reader_hooks(
    meter_provider: metrics.MeterProvider | None, settings: RunSettings, incidents: Incidents
) -> ReaderHooks | None:
    """Return the readers of the application's MeterProvider, to collect looptrace's metrics too."""
    if meter_provider is None or settings.disabled:
        return None
    return ReaderHooks(meter_provider, incidents)


@dataclass(frozen=True)
class _Clocks:
    """The host clock, and the device clock when devices are timed apart from the host."""

    host: Clock
    device: DeviceClock | None
    synced: bool  # every boundary waits for the device: the host clock times everything


def _clocks(clock: Clock | None, device_clock: DeviceClock | None, *, device_sync: bool) -> _Clocks:
    host = clock or MonotonicClock()
    if not device_sync:
        return _Clocks(host, device_clock, synced=False)
    device = device_clock or _cuda_clock("device_sync=True")
    return _Clocks(SyncedClock(host, device), None, synced=True)


def _cuda_clock(setting: str) -> CudaEventClock:
    try:
        return CudaEventClock()
    except Exception as error:
        raise ConfigError(f"{setting} needs a CUDA device: {error}") from None


def _engine(
    *,
    settings: RunSettings,
    clocks: _Clocks,
    aggregator: Aggregator,
    tracing: Tracing,
    rank: RankInfo,
    incidents: Incidents,
    slow_lap_factor: float | None,
) -> Engine:
    """Make the lap engine: clocks, aggregation, and the spans of the sampled steps."""
    engine = Engine(
        clock=clocks.host,
        aggregator=aggregator,
        tracer=tracing.tracer,
        sampler=settings.sampler,
        step_traces=tracing.step_traces,
        span_attributes=rank.span_attributes(),
        incidents=incidents,
        device_clock=clocks.device,
        slow_lap_factor=slow_lap_factor,
    )
    watched = tracing.span_processors()
    if watched is not None:
        engine.spans.watch(*watched)
    if clocks.synced:
        engine.device.disable()  # every boundary is already host-aligned
    return engine


def _handle(
    *,
    engine: Engine,
    aggregator: Aggregator,
    tracing: Tracing,
    sinks: Sinks,
    rank: RankInfo,
    incidents: Incidents,
    outputs: Outputs,
    memory: MemoryReader,
) -> Looptrace:
    """Make the user's handle, flushed at exit (within the exporters' timeout) if it writes."""
    lt = Looptrace(
        engine=engine,
        aggregator=aggregator,
        incidents=incidents,
        rank=rank,
        outputs=outputs,
        processor=tracing.processor,
        memory=memory,
        flush=sinks.flush if sinks.active else None,
    )
    if sinks.active:
        install_exit_flush(lt, sinks.flush, sinks.timeout_s, incidents)
    return lt
