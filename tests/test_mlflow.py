"""A real MLflow tracking server (>= 3.6) receives looptrace's step traces over OTLP/HTTP."""

from __future__ import annotations

import base64
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers.processes import bare_env
from .helpers.servers import Mlflow, binary
from .helpers.waiting import wait_until


@pytest.fixture(scope="session")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mlflow]:
    """Start one MLflow tracking server for the test run."""
    server = Mlflow(binary("LOOPTRACE_TEST_MLFLOW"), Path(tmp_path_factory.mktemp("mlflow")))
    yield server
    server.stop()


# The README's MLflow recipe: only the variables, no exporter arguments in code.
PROGRAM = """
    import looptrace
    from looptrace.testing import FakeClock

    clock = FakeClock()
    lt = looptrace.configure("weathergen", clock=clock)
    train = lt.timer("train")
    forward = train.timer("forward")
    for step in range(2):
        train.record("data"); clock.advance(0.1)
        train.record("forward"); forward.record("encoder"); clock.advance(0.2)
        forward.record("decoder"); clock.advance(0.3)
        train.record("backward"); clock.advance(0.4)
        train.record()
    train.stop()
    lt.shutdown()
    print(lt.health().dropped_spans)
"""


def _hex(b64: str) -> str:
    return base64.b64decode(b64).hex()


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in span.get("attributes", []):
        value = item["value"]
        values[item["key"]] = (
            int(value["int_value"]) if "int_value" in value else next(iter(value.values()))
        )
    return values


def _parent(span: dict[str, Any], by_id: dict[str, Any]) -> tuple[str, int] | None:
    """Return the (name, rank) of a span's parent within its trace."""
    found = by_id.get(span.get("parent_span_id", ""))
    return None if found is None else (found["name"], _attrs(found)["looptrace.rank"])


def test_step_traces_of_two_ranks_arrive_in_mlflow_with_their_structure(mlflow: Mlflow) -> None:
    """Each step is one trace holding both ranks: rank 0's lap is the root, rank 1's under it."""
    experiment = mlflow.create_experiment("looptrace-steps")
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(PROGRAM)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **bare_env(),
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{mlflow.url}/v1/traces",
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"x-mlflow-experiment-id={experiment}",
                "RANK": str(rank),
                "WORLD_SIZE": "2",
                "TORCHELASTIC_RUN_ID": "job-7",
            },
        )
        for rank in range(2)
    ]
    for process in ranks:
        out, err = process.communicate(timeout=120)
        assert (process.returncode, out.strip()) == (0, "0"), err[-3000:]

    # The exporter says nothing about what the server did with the spans: ask the server.
    def complete() -> bool:
        traces = mlflow.traces(experiment)
        return len(traces) == 3 and sum(len(t["spans"]) for t in traces) == 2 * (2 * 6 + 1)

    assert wait_until(complete, timeout=30, interval=0.5)
    structures = []
    for trace in mlflow.traces(experiment):
        spans = trace["spans"]
        assert {s["trace_id"] for s in spans} == {spans[0]["trace_id"]}
        assert trace["trace_info"]["trace_id"] == f"tr-{_hex(spans[0]['trace_id'])}"
        by_id = {s["span_id"]: s for s in spans}
        structures.append(
            sorted(
                (
                    _attrs(s)["looptrace.step"],
                    _attrs(s)["looptrace.rank"],
                    s["name"],
                    _parent(s, by_id),
                    _attrs(s)["looptrace.path"],
                    _attrs(s)["looptrace.world_size"],
                    round((int(s["end_time_unix_nano"]) - int(s["start_time_unix_nano"])) / 1e9, 6),
                )
                for s in spans
            )
        )

    def step(n: int) -> list[tuple[Any, ...]]:
        rows = []
        for rank in range(2):
            lap_parent = None if rank == 0 else ("train", 0)
            rows += [
                (n, rank, "backward", ("train", rank), "root.train.backward", 2, 0.4),
                (n, rank, "data", ("train", rank), "root.train.data", 2, 0.1),
                (n, rank, "decoder", ("forward", rank), "root.train.forward.decoder", 2, 0.3),
                (n, rank, "encoder", ("forward", rank), "root.train.forward.encoder", 2, 0.2),
                (n, rank, "forward", ("train", rank), "root.train.forward", 2, 0.5),
                (n, rank, "train", lap_parent, "root.train", 2, 1.0),
            ]
        return sorted(rows)

    last_lap = sorted(
        [
            (2, 0, "train", None, "root.train", 2, 0.0),
            (2, 1, "train", ("train", 0), "root.train", 2, 0.0),
        ]
    )
    assert sorted(structures) == sorted([step(0), step(1), last_lap])


def test_snapshot_metrics_log_to_mlflow_at_the_window_step(mlflow: Mlflow) -> None:
    """as_metrics(stats=, sep="/") keys are MLflow metric names; step=snap.step is the x axis."""
    import time

    from opentelemetry.sdk.trace import TracerProvider

    import looptrace
    from looptrace.testing import FakeClock

    from .helpers.servers import http_json

    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=TracerProvider(), clock=clock, trace_every=0)
    train = lt.timer("train")
    snapshots = []
    for step, seconds in enumerate(train.iterate([0.1, 0.2, 0.3, 0.4, 0.5])):
        with train.section("forward"):
            clock.advance(seconds)
        if step == 2:
            snapshots.append(lt.reset())
    snapshots.append(lt.reset())
    lt.shutdown()
    experiment = mlflow.create_experiment("looptrace-metrics")
    run = http_json(
        f"{mlflow.url}/api/2.0/mlflow/runs/create",
        {"experiment_id": experiment, "start_time": int(time.time() * 1000)},
    )["run"]["info"]["run_id"]
    for snap in snapshots:
        metrics = snap.as_metrics(prefix="timing", stats=("mean", "p99"), sep="/")
        batch = [
            {"key": key, "value": value, "timestamp": 0, "step": snap.step}
            for key, value in metrics.items()
        ]
        http_json(f"{mlflow.url}/api/2.0/mlflow/runs/log-batch", {"run_id": run, "metrics": batch})
    history = http_json(
        f"{mlflow.url}/api/2.0/mlflow/metrics/get-history?run_id={run}"
        "&metric_key=timing/root/train/forward/mean"
    )["metrics"]
    keys = http_json(f"{mlflow.url}/api/2.0/mlflow/runs/get?run_id={run}")["run"]["data"]
    assert sorted((m["step"], round(m["value"], 9)) for m in history) == [(2, 0.2), (5, 0.45)]
    assert sorted(m["key"] for m in keys["metrics"]) == sorted(
        f"timing/{path}/{stat}"
        for path in ("root/train", "root/train/data", "root/train/forward")
        for stat in ("mean", "p99")
    )
