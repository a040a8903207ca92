"""One section's cost in benchmarks/integrations.py: the profiler-range gate and the ranges."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from integrations_rounds import median_of

ROOT = Path(__file__).resolve().parent.parent
SECTION_LOOP = """
import sys, time
import torch
import looptrace
from opentelemetry.sdk.trace import TracerProvider
lt = looptrace.configure("bench", tracer_provider=TracerProvider(), trace_every=0)
train = lt.timer("train")
names = ("data", "forward", "backward", "optimizer") * 5
steps = int(sys.argv[1])
best = None
for _ in range(5):
    start = time.process_time_ns()
    for _ in range(steps):
        for name in names:
            train.record(name)
        train.record()
    lt.reset()
    cost = (time.process_time_ns() - start) / (steps * 21)
    best = cost if best is None else min(best, cost)
print(best)
"""


def gate(rounds: int, steps: int, baseline: str | None) -> dict[str, float]:
    """Nanoseconds per aggregated section, this tree and (optionally) a baseline commit."""
    sources = {"this tree": ROOT / "src"}
    keep = None
    if baseline:
        keep = tempfile.TemporaryDirectory()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", baseline, "src"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", keep.name], input=archive.stdout, check=True)
        sources[f"baseline {baseline}"] = Path(keep.name) / "src"

    def run(src: Path) -> Callable[[], float]:
        def once() -> float:
            env = {**os.environ, "PYTHONPATH": str(src)}
            done = subprocess.run(
                [sys.executable, "-c", SECTION_LOOP, str(steps)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            return float(done.stdout.strip().splitlines()[-1])

        return once

    result = median_of(rounds, {name: run(src) for name, src in sources.items()})
    if keep is not None:
        keep.cleanup()
    return {f"record() section, no profiler ({name}) [ns]": v for name, v in result.items()}


def ranges(rounds: int, steps: int) -> dict[str, float]:
    """Nanoseconds per section while a torch.profiler records, against no profiler."""
    import torch
    from opentelemetry.sdk.trace import TracerProvider

    import looptrace

    lt = looptrace.configure("bench", tracer_provider=TracerProvider(), trace_every=0)
    train = lt.timer("train")
    names = ("data", "forward", "backward", "optimizer") * 5

    def loop() -> float:
        start = time.process_time_ns()
        for _ in range(steps):
            for name in names:
                train.record(name)
            train.record()
        train.stop()
        return (time.process_time_ns() - start) / (steps * 21)

    def profiled() -> float:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            return loop()

    result = median_of(rounds, {"no profiler": loop, "torch.profiler recording": profiled})
    lt.shutdown()
    return {f"record() section, {name} [ns]": value for name, value in result.items()}
