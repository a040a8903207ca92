"""Experiment loggers, read back: W&B offline files, TensorBoard event files, a real MLflow."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace import ConfigError, Snapshot
from looptrace.testing import Capture, FakeClock

from .helpers.servers import Mlflow, binary, http_json
from .helpers.waiting import wait_until


def _windows(cap: Capture) -> list[Snapshot]:
    """Two windows of 3 steps: `forward` 0.1 s, `backward` 0.2 s then 0.4 s."""
    train = cap.lt.timer("train")
    windows = []
    for backward in (0.2, 0.4):
        for _ in range(3):
            train.record("forward")
            cap.clock.advance(0.1)
            train.record("backward")
            cap.clock.advance(backward)
            train.record()
        windows.append(cap.lt.reset())
    train.stop()
    return windows


# -- W&B ------------------------------------------------------------------------------------


def _wandb_records(run_dir: Path) -> list[Any]:
    """Return the protobuf records of an offline run's `.wandb` file (a LevelDB-style log)."""
    proto = pytest.importorskip("wandb.proto.wandb_internal_pb2")
    (path,) = run_dir.glob("run-*.wandb")
    raw = path.read_bytes()
    block, pos, pending, records = 32768, 7, b"", []
    while pos + 7 <= len(raw):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = struct.unpack_from("<HB", raw, pos + 4)
        if pos + 7 + length > len(raw):  # still being written
            break
        data, pos = raw[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = data if kind in (1, 2) else pending + data
        if kind in (1, 4):  # a full record, or the last piece of one
            record = proto.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def test_wandb_offline_run_has_grouped_keys_on_the_timing_step_axis(
    cap: Capture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`/`-grouped keys with `timing/step`, which `define_metric` makes their x-axis."""
    wandb = pytest.importorskip("wandb", reason="the loggers extra is not installed")
    from looptrace.integrations.wandb import log_snapshot

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    first, second = _windows(cap)
    run = wandb.init(project="looptrace-test", dir=str(tmp_path))
    try:
        run.log({"loss": 1.0})
        log_snapshot(first, step=3, stats=("count", "mean"))
        log_snapshot(second, step=6, stats=("count", "mean"))
    finally:
        run.finish()
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")

    def finished() -> bool:  # W&B's service may still be writing after finish() returns
        return any(r.WhichOneof("record_type") == "exit" for r in _wandb_records(run_dir))

    assert wait_until(finished, timeout=30, interval=0.2)
    records = _wandb_records(run_dir)
    metrics = [
        (r.metric.name, r.metric.glob_name, r.metric.step_metric)
        for r in records
        if r.WhichOneof("record_type") == "metric"
    ]
    assert ("", "timing/*", "timing/step") in metrics
    rows = [
        {
            item.key or "/".join(item.nested_key): json.loads(item.value_json)
            for item in r.history.item
        }
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    timing = [
        {k: round(v, 9) for k, v in row.items() if k.startswith("timing/")}
        for row in rows
        if "timing/step" in row
    ]
    assert timing == [
        {
            "timing/step": 3,
            "timing/root/train/count": 3,
            "timing/root/train/mean": 0.3,
            "timing/root/train/forward/count": 3,
            "timing/root/train/forward/mean": 0.1,
            "timing/root/train/backward/count": 3,
            "timing/root/train/backward/mean": 0.2,
        },
        {
            "timing/step": 6,
            "timing/root/train/count": 3,
            "timing/root/train/mean": 0.5,
            "timing/root/train/forward/count": 3,
            "timing/root/train/forward/mean": 0.1,
            "timing/root/train/backward/count": 3,
            "timing/root/train/backward/mean": 0.4,
        },
    ]


def test_wandb_without_a_run_is_a_config_error(cap: Capture) -> None:
    """Logging before `wandb.init()` names the problem."""
    pytest.importorskip("wandb", reason="the loggers extra is not installed")
    from looptrace.integrations.wandb import log_snapshot

    with pytest.raises(ConfigError, match=r"no W&B run; call wandb.init\(\) first"):
        log_snapshot(cap.lt.reset(), step=0)


# -- TensorBoard ----------------------------------------------------------------------------


def test_tensorboard_scalars_and_a_histogram_per_section_read_back(
    cap: Capture, tmp_path: Path
) -> None:
    """Scalars per statistic, and a histogram per section built from its buckets."""
    writer_module = pytest.importorskip("torch.utils.tensorboard", reason="needs tensorboard")
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    from looptrace.integrations.tensorboard import histogram_buckets, log_snapshot

    first, second = _windows(cap)
    with writer_module.SummaryWriter(log_dir=str(tmp_path)) as writer:
        log_snapshot(writer, first, step=3, stats=("mean",))
        log_snapshot(writer, second, step=6, stats=("mean",))
    reader = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"histograms": 0})
    reader.Reload()
    assert sorted(reader.Tags()["scalars"]) == [
        "timing/root/train/backward/mean",
        "timing/root/train/forward/mean",
        "timing/root/train/mean",
    ]
    assert sorted(reader.Tags()["histograms"]) == [
        "timing/root/train",
        "timing/root/train/backward",
        "timing/root/train/forward",
    ]
    backward = [
        (e.step, round(e.value, 6)) for e in reader.Scalars("timing/root/train/backward/mean")
    ]
    assert backward == [(3, 0.2), (6, 0.4)]
    for window, event in zip(
        (first, second), reader.Histograms("timing/root/train/backward"), strict=True
    ):
        stats = window["root.train.backward"]
        limits, counts = histogram_buckets(stats)
        histogram = event.histogram_value
        assert (event.step, histogram.num, round(histogram.sum, 6)) == (
            {3: 3, 6: 6}[event.step],
            3,
            round(stats.total, 6),
        )
        assert list(histogram.bucket) == counts
        assert [round(x, 9) for x in histogram.bucket_limit] == [round(x, 9) for x in limits]
        assert sum(counts) == 3
        # Each duration lies in the bucket whose upper limit is the first one above it.
        assert limits[-1] >= stats.max > (limits[-2] if len(limits) > 1 else 0)


# -- MLflow ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mlflow]:
    """Start a real MLflow tracking server for this module."""
    pytest.importorskip("mlflow", reason="the loggers extra is not installed")
    server = Mlflow(binary("LOOPTRACE_TEST_MLFLOW"), Path(tmp_path_factory.mktemp("mlflow")))
    yield server
    server.stop()


@pytest.fixture
def mlflow_client(mlflow_server: Mlflow, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Point the MLflow client of this process at the test server."""
    mlflow = pytest.importorskip("mlflow", reason="the loggers extra is not installed")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    return mlflow


def test_mlflow_log_snapshot_logs_metrics_at_the_step_with_valid_keys(
    cap: Capture, mlflow_client: Any
) -> None:
    """Metrics land on the run at the given step; characters MLflow rejects become `_`."""
    from looptrace.integrations.mlflow import log_snapshot

    lightning_like = cap.lt.timer("fit").section("[Strategy]Single:backward")
    with lightning_like:
        cap.clock.advance(0.25)
    first, second = _windows(cap)
    experiment = mlflow_client.create_experiment("looptrace-metrics")
    with mlflow_client.start_run(experiment_id=experiment) as run:
        logged = log_snapshot(first, step=3, stats=("count", "mean"))
        log_snapshot(second, step=6, stats=("count", "mean"))
    assert "timing.root.fit._Strategy_Single_backward.mean" in logged
    client = mlflow_client.tracking.MlflowClient()
    history = {
        key: [(m.step, round(m.value, 9)) for m in client.get_metric_history(run.info.run_id, key)]
        for key in (
            "timing.root.train.backward.mean",
            "timing.root.train.count",
            "timing.root.fit._Strategy_Single_backward.mean",
        )
    }
    assert history == {
        "timing.root.train.backward.mean": [(3, 0.2), (6, 0.4)],
        "timing.root.train.count": [(3, 3.0), (6, 3.0)],
        "timing.root.fit._Strategy_Single_backward.mean": [(3, 0.25)],
    }


def _server_links_runs() -> str | None:
    """Return why the test server cannot link OTLP traces to runs, or None when it can."""
    python = Path(binary("LOOPTRACE_TEST_MLFLOW")).parent / "python"
    probe = "import mlflow; from mlflow.tracing.utils.otlp import MLFLOW_RUN_ID_HEADER"
    found = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False)
    if found.returncode == 0:
        return None
    version = subprocess.run(
        [str(python), "-c", "import mlflow; print(mlflow.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"MLflow server {version or '?'} does not read x-mlflow-run-id on OTLP traces"


def test_traces_sent_with_otlp_options_are_linked_to_the_active_run(
    mlflow_server: Mlflow, mlflow_client: Any
) -> None:
    """Inside a run, `configure(**otlp_options())` exports each step's trace onto that run."""
    from looptrace.integrations.mlflow import RUN_HEADER, otlp_options

    experiment = mlflow_client.create_experiment("looptrace-linked")
    clock = FakeClock()
    with mlflow_client.start_run(experiment_id=experiment) as run:
        options = otlp_options()
        lt = looptrace.configure(
            "linked", tracer_provider=TracerProvider(), clock=clock, trace_every=1, **options
        )
        train = lt.timer("train")
        for step in range(2):
            if step:
                train.record()
            train.record("forward")
            clock.advance(0.1)
        train.stop()
        lt.shutdown()
    assert options["otlp_headers"] == {
        "x-mlflow-experiment-id": experiment,
        RUN_HEADER: run.info.run_id,
    }
    assert lt.health().dropped_spans == 0
    location = {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": experiment}}

    def search(filter_string: str | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"locations": [location], "max_results": 100}
        if filter_string:
            body["filter"] = filter_string
        found = http_json(f"{mlflow_server.url}/api/3.0/mlflow/traces/search", body)
        return list(found.get("traces", []))

    assert len(search()) == 2
    why_not = _server_links_runs()
    if why_not is not None:
        pytest.skip(f"{why_not}: the traces arrived, the run link is not checked")
    assert len(search(f"attribute.run_id = '{run.info.run_id}'")) == 2
    assert search("attribute.run_id = 'another-run'") == []


def test_otlp_options_without_an_http_tracking_server_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A file-based tracking URI cannot take traces; the error says so."""
    pytest.importorskip("mlflow", reason="the loggers extra is not installed")
    from looptrace.integrations.mlflow import otlp_options

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file://{tmp_path}")
    with pytest.raises(ConfigError, match=r"is not an HTTP server; traces need an MLflow"):
        otlp_options()
    assert os.environ["MLFLOW_TRACKING_URI"].startswith("file://")


def test_flat_keys_of_distinct_paths_stay_distinct_with_a_slash(cap: Capture) -> None:
    """The loggers' flat keys escape a `/` inside a name as as_metrics does: no key is shared."""
    from looptrace.integrations._common import flat_metrics

    train = cap.lt.timer("t")
    with train.timer("a").section("b"):  # root.t.a.b
        cap.clock.advance(0.001)
    with train.section("a/b"):  # root.t.a/b
        cap.clock.advance(0.002)
    snapshot = cap.lt.reset()
    keys = flat_metrics(snapshot, stats_names=("total",), sep="/")
    assert keys == snapshot.as_metrics(prefix="timing", stats=("total",), sep="/")
    assert "timing/root/t/a%2Fb/total" in keys and "timing/root/t/a/b/total" in keys
