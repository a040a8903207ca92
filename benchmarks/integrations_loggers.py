"""The loggers in benchmarks/integrations.py: one `log_snapshot` call per window."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from integrations_rounds import median_of


def loggers(rounds: int, calls: int) -> dict[str, float]:
    """Microseconds per `log_snapshot` call of each logger, for a window of 6 sections."""
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    import mlflow
    import wandb
    from opentelemetry.sdk.trace import TracerProvider
    from torch.utils.tensorboard import SummaryWriter

    import looptrace
    from looptrace.integrations import mlflow as lt_mlflow
    from looptrace.integrations import tensorboard as lt_tensorboard
    from looptrace.integrations import wandb as lt_wandb

    lt = looptrace.configure("bench", tracer_provider=TracerProvider(), trace_every=0)
    train = lt.timer("train")
    for _ in range(100):
        for name in ("data", "forward", "backward", "optimizer"):
            train.record(name)
        with train.section("log"):
            pass
        train.record()
    train.stop()
    snapshot = lt.reset()
    work = Path(tempfile.mkdtemp())
    writer = SummaryWriter(log_dir=str(work / "tb"))
    run = wandb.init(project="bench", dir=str(work))
    mlflow.set_tracking_uri((work / "mlruns").as_uri())
    mlflow.start_run()
    step = [0]

    def timed(call: Callable[[int], object]) -> Callable[[], float]:
        def once() -> float:
            start = time.perf_counter_ns()
            for _ in range(calls):
                step[0] += 1
                call(step[0])
            return (time.perf_counter_ns() - start) / calls / 1000

        return once

    result = median_of(
        rounds,
        {
            "TensorBoard (scalars and histograms)": timed(
                lambda s: lt_tensorboard.log_snapshot(writer, snapshot, step=s)
            ),
            "W&B offline": timed(lambda s: lt_wandb.log_snapshot(snapshot, step=s, run=run)),
            "MLflow (local file store)": timed(lambda s: lt_mlflow.log_snapshot(snapshot, step=s)),
        },
    )
    writer.close()
    run.finish()
    mlflow.end_run()
    lt.shutdown()
    return {f"log_snapshot, {name} [µs per window]": value for name, value in result.items()}
