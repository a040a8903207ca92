"""A real MLflow tracking server (>= 3.6) receives looptrace's step traces over OTLP/HTTP."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .otlp_receiver import wait_until
from .servers import Mlflow, binary


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


def test_step_traces_arrive_in_mlflow_with_their_structure(mlflow: Mlflow) -> None:
    """Each step is one trace in the experiment: root lap, nested sections, paths and ranks."""
    experiment = mlflow.create_experiment("looptrace-steps")
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROGRAM)],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{mlflow.url}/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"x-mlflow-experiment-id={experiment}",
            "RANK": "1",
            "WORLD_SIZE": "2",
            "TORCHELASTIC_RUN_ID": "job-7",
        },
    )
    assert (result.returncode, result.stdout.strip()) == (0, "0"), result.stderr[-3000:]
    # The exporter says nothing about what the server did with the spans: ask the server.
    assert wait_until(lambda: len(mlflow.traces(experiment)) == 3, timeout=30, interval=0.5)
    structures = []
    for trace in mlflow.traces(experiment):
        spans = trace["spans"]
        assert {s["trace_id"] for s in spans} == {spans[0]["trace_id"]}
        assert trace["trace_info"]["trace_id"] == f"tr-{_hex(spans[0]['trace_id'])}"
        names = {s["span_id"]: s["name"] for s in spans}
        structures.append(
            sorted(
                (
                    _attrs(s)["looptrace.step"],
                    s["name"],
                    names.get(s.get("parent_span_id", "")),
                    _attrs(s)["looptrace.path"],
                    _attrs(s)["looptrace.rank"],
                    _attrs(s)["looptrace.world_size"],
                    round((int(s["end_time_unix_nano"]) - int(s["start_time_unix_nano"])) / 1e9, 6),
                )
                for s in spans
            )
        )
    assert sorted(structures) == sorted(
        [
            [
                (step, "backward", "train", "root.train.backward", 1, 2, 0.4),
                (step, "data", "train", "root.train.data", 1, 2, 0.1),
                (step, "decoder", "forward", "root.train.forward.decoder", 1, 2, 0.3),
                (step, "encoder", "forward", "root.train.forward.encoder", 1, 2, 0.2),
                (step, "forward", "train", "root.train.forward", 1, 2, 0.5),
                (step, "train", None, "root.train", 1, 2, 1.0),
            ]
            for step in range(2)
        ]
        + [[(2, "train", None, "root.train", 1, 2, 0.0)]]
    )
