"""looptrace's metrics through the readers of an application's `MeterProvider`.

The OpenTelemetry Python SDK has no `MetricProducer` yet: a reader collects only what the
provider's own instruments aggregated, and recording each duration through a `Histogram`
would cost microseconds per section. So each reader the provider holds at `configure()` gets
its collection extended: whenever it collects (a periodic export, a Prometheus scrape, the
provider's `force_flush()` that `reset()` asks a thread of looptrace's for), looptrace's
pre-aggregated metrics ride along under the `looptrace` scope, in the temporality the reader
prefers. They are the numbers the OTLP push and the Prometheus endpoint serve, rendered by the
same code.

This reaches into the SDK (a reader's collect callback and temporality table, the provider's
readers and resource); `ReaderHooks` checks each at `configure()` and raises `ConfigError`
when the installed SDK lacks one, rather than losing the metrics silently. Readers added to
the provider after `configure()` are not extended.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any, Final

from opentelemetry.metrics import MeterProvider, NoOpMeterProvider
from opentelemetry.sdk.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricReader,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource

from looptrace._base.errors import ConfigError
from looptrace._distributed.ranks import RankInfo
from looptrace._export.coalesced import Coalesced
from looptrace._export.cumulative import CumulativeHistograms, DeltaCursor
from looptrace._export.exponential import HistogramKind
from looptrace._export.outputs import Outputs
from looptrace._stats.health import Incidents
from looptrace._stats.snapshot import Snapshot

Collect = Callable[..., MetricsData | None]
FLUSH_TIMEOUT_S: Final = 10.0  # what `shutdown()` waits for the last flush: the SDK's default


class ReaderHooks:
    """The readers of an application's MeterProvider, checked, ready to be extended."""

    def __init__(self, provider: MeterProvider, incidents: Incidents) -> None:
        """Find the readers of `provider`; a no-op provider has none.

        Raises:
            ConfigError: `provider` is not an SDK MeterProvider, or the SDK lacks a hook.

        """
        self._readers: list[tuple[MetricReader, Collect, bool]] = []
        self._incidents = incidents
        self._config: Any = None
        self._provider: SdkMeterProvider | None = None
        self._own: CumulativeHistograms | None = None  # the totals, when no pipeline has them
        self._flushes = Coalesced(self._flush_now, "looptrace-app-metrics")
        if hasattr(os, "register_at_fork"):
            flushes = weakref.ref(self._flushes)

            def renew() -> None:  # a forked child flushes its own windows, on its own thread
                runner = flushes()
                if runner is not None:
                    runner.after_fork_in_child(closed=False)

            os.register_at_fork(after_in_child=renew)
        if isinstance(provider, NoOpMeterProvider):
            return
        if not isinstance(provider, SdkMeterProvider):
            raise ConfigError(
                "meter_provider: looptrace hands its aggregated histograms to the readers of "
                f"an opentelemetry-sdk MeterProvider; got {type(provider).__qualname__}"
            )
        self._provider = provider
        self._config = getattr(provider, "_sdk_config", None)
        readers = getattr(provider, "_metric_readers", None)  # before 1.43: in _sdk_config
        readers = getattr(self._config, "metric_readers", None) if readers is None else readers
        if readers is None or not isinstance(getattr(self._config, "resource", None), Resource):
            raise _missing("MeterProvider._metric_readers / _sdk_config.resource")
        for reader in readers:
            collect = getattr(reader, "_collect", None)
            if collect is None:
                continue  # shut down, or not registered with this provider
            if not hasattr(reader, "_set_collect_callback"):
                raise _missing("MetricReader._set_collect_callback")
            self._readers.append((reader, collect, _prefers_delta(reader)))

    def __bool__(self) -> bool:
        return bool(self._readers)

    def attach(
        self,
        outputs: Outputs,
        histograms: CumulativeHistograms | None,
        resource: Resource,
        rank: RankInfo,
        histogram: HistogramKind = "explicit",
    ) -> None:
        """Make every reader also collect looptrace's metrics, flushed at every `reset()`.

        The totals are those of the export pipeline's `histograms`, else a set of their own.
        """
        incidents = self._incidents
        if histograms is None:
            histograms = CumulativeHistograms(
                resource, rank.span_attributes(), incidents, histogram=histogram
            )
            outputs.on_reset.append(histograms.add)
            self._own = histograms
        for reader, collect, delta in self._readers:
            cursor = histograms.delta_cursor() if delta else None
            extended = _extended(collect, histograms, cursor, self._config, incidents)
            # The SDK calls it as (reader, timeout_millis=...); its annotation says otherwise.
            reader._set_collect_callback(extended)  # type: ignore[arg-type]
        outputs.on_reset.append(self.flush)
        outputs.on_shutdown.append(self.close)

    def flush(self, _snapshot: Snapshot) -> None:
        """Have the readers collect soon, on looptrace's thread: `reset()` returns at once."""
        self._flushes.request()

    def close(self) -> None:
        """Flush the last window, waiting at most `FLUSH_TIMEOUT_S`; flush nothing after."""
        self._flushes.wait(self._flushes.request(), FLUSH_TIMEOUT_S)
        self._flushes.close()
        if self._own is not None:
            self._own.close()

    def _flush_now(self, _ticket: int) -> None:
        try:
            if self._provider is not None:
                self._provider.force_flush()
        except Exception:
            self._incidents.failed("flush of an application's MeterProvider")


def _extended(
    collect: Collect,
    histograms: CumulativeHistograms,
    cursor: DeltaCursor | None,
    config: Any,
    incidents: Incidents,
) -> Collect:
    def collect_with_looptrace(
        reader: MetricReader, timeout_millis: float = 10_000
    ) -> MetricsData | None:
        data = collect(reader, timeout_millis=timeout_millis)
        try:
            scope = histograms.scope_metrics(cursor)
            return data if scope is None else _merged(data, scope, config.resource)
        except Exception:
            incidents.failed("metrics for an application's metric reader")
            return data

    return collect_with_looptrace


def _merged(data: MetricsData | None, scope: ScopeMetrics, resource: Resource) -> MetricsData:
    """Add looptrace's scope to the provider's collection (one resource per provider)."""
    if data is None or not data.resource_metrics:
        return MetricsData(
            resource_metrics=[
                ResourceMetrics(
                    resource=resource, scope_metrics=[scope], schema_url=resource.schema_url
                )
            ]
        )
    first, *rest = data.resource_metrics
    merged = ResourceMetrics(
        resource=first.resource,
        scope_metrics=[*first.scope_metrics, scope],
        schema_url=first.schema_url,
    )
    return MetricsData(resource_metrics=[merged, *rest])


def _prefers_delta(reader: MetricReader) -> bool:
    table = getattr(reader, "_instrument_class_temporality", None)
    if not isinstance(table, dict):
        raise _missing("MetricReader._instrument_class_temporality")
    return any(
        issubclass(kind, Histogram) and temporality is AggregationTemporality.DELTA
        for kind, temporality in table.items()
    )


def _missing(hook: str) -> ConfigError:
    return ConfigError(
        f"meter_provider: the installed opentelemetry-sdk has no {hook}, through which "
        "looptrace hands its metrics to the application's readers; install the "
        "opentelemetry-sdk version looptrace requires"
    )
