"""MLflow: a window's statistics as run metrics, and traces linked to the active run.

`log_snapshot(snapshot)` logs `timing.<path>.<stat>` with `step=snapshot.step`. `otlp_options()`
returns the `looptrace.configure()` arguments that send the traces to the MLflow tracking server
(≥ 3.6 ingests OTLP/HTTP) with the experiment and the run as headers, so that servers which
understand `x-mlflow-run-id` show each step's trace on the run's page.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

import mlflow
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from looptrace._base.errors import ConfigError
from looptrace._stats.snapshot import SectionStats
from looptrace.integrations._common import DEFAULT_STATS, checked_stats, flat_metrics, step_of

__all__ = ["EXPERIMENT_HEADER", "RUN_HEADER", "log_snapshot", "metric_key", "otlp_options"]

EXPERIMENT_HEADER = "x-mlflow-experiment-id"
RUN_HEADER = "x-mlflow-run-id"
# MLflow metric keys: alphanumerics, `_`, `-`, `.`, ` `, `/` and `:` (not on Windows).
_NOT_ALLOWED = re.compile(r"[^\w\-. /]")


def metric_key(key: str) -> str:
    """Return `key` with every character MLflow rejects in a metric key replaced by `_`."""
    return _NOT_ALLOWED.sub("_", key)


def log_snapshot(
    snapshot: Mapping[str, SectionStats],
    *,
    step: int | None = None,
    run_id: str | None = None,
    prefix: str = "timing",
    stats: Iterable[str] = DEFAULT_STATS,
    synchronous: bool = True,
) -> dict[str, float]:
    """Log a window's statistics to an MLflow run in one batch and return what was logged.

    Args:
        snapshot: what `lt.reset()` returned.
        step: the metric step (default `snapshot.step`).
        run_id: the run (default: the active run).
        prefix: the first part of every key (`timing.root.train.forward.mean`).
        stats: the statistics logged per section.
        synchronous: wait for the server (False: MLflow's asynchronous logging).

    Raises:
        ConfigError: no run given and none active, no step, or an unknown statistic.

    """
    chosen = checked_stats(stats, "log_snapshot")
    if run_id is None:
        active = mlflow.active_run()
        if active is None:
            raise ConfigError("log_snapshot(): no MLflow run is active and no run_id was given")
        run_id = active.info.run_id
    at = step_of(snapshot, step, "log_snapshot")
    values = {
        metric_key(key): value
        for key, value in flat_metrics(snapshot, prefix=prefix, stats_names=chosen).items()
    }
    end_ns = int(getattr(snapshot, "end_ns", 0))
    timestamp = end_ns // 1_000_000 if end_ns > 0 else int(time.time() * 1000)
    metrics = [Metric(key, value, timestamp, at) for key, value in values.items()]
    if metrics:
        MlflowClient().log_batch(run_id, metrics=metrics, synchronous=synchronous)
    return values


def otlp_options(
    *,
    run_id: str | None = None,
    experiment_id: str | None = None,
    tracking_uri: str | None = None,
) -> dict[str, Any]:
    """Return the `looptrace.configure()` arguments that export traces to MLflow's server.

    The endpoint is the tracking server (`/v1/traces` is appended); the headers name the
    experiment and the run, by default those of the active run. Metrics stay off (MLflow takes
    traces over OTLP; log statistics with `log_snapshot`). Call it inside the run, before
    `configure()`: `looptrace.configure("train", **otlp_options())`.

    Raises:
        ConfigError: the tracking URI is not an HTTP server, or no experiment is known.

    """
    uri = tracking_uri or mlflow.get_tracking_uri()
    if not uri.startswith(("http://", "https://")):
        raise ConfigError(
            f"otlp_options(): MLflow's tracking URI {uri!r} is not an HTTP server; traces "
            "need an MLflow tracking server (mlflow server, >= 3.6)"
        )
    active = mlflow.active_run()
    if run_id is None and active is not None:
        run_id = active.info.run_id
    if experiment_id is None:
        if run_id is not None:
            experiment_id = MlflowClient(tracking_uri=uri).get_run(run_id).info.experiment_id
        else:
            raise ConfigError("otlp_options(): no MLflow run is active and no experiment_id given")
    headers = {EXPERIMENT_HEADER: str(experiment_id)}
    if run_id is not None:
        headers[RUN_HEADER] = run_id
    return {
        "otlp_endpoint": uri,
        "otlp_protocol": "http/protobuf",
        "otlp_headers": headers,
        "traces_exporter": "otlp",
        "metrics_exporter": "none",
    }
