"""`reset()` on the training thread with each output attached: worst and median, beside P6.

`reset()` hands its window to every output and returns; the outputs fold and write on threads
of their own. This times each `reset()` call alone (the laps between are not timed) with one
output attached at a time, nobody reading the metrics: a snapshot file, the Prometheus endpoint
(never scraped), the OTLP metrics push (to a receiver in a child process) and an application's
MeterProvider. Two window shapes: 100 paths x 100 laps, and 1,000 paths x 10 laps.

    python benchmarks/reset_outputs.py            # full run, JSON on stdout
    python benchmarks/reset_outputs.py --quick    # a few seconds

Figures before and after `reset()` stopped folding and writing on its own thread:
`reset_outputs.json` beside this file.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import TracerProvider
from otlp_sink import ChildReceiver

import looptrace

SHAPES = {"100 paths x 100 laps": (100, 100), "1000 paths x 10 laps": (1000, 10)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _app_meter_provider(exporter: MetricExporter) -> MeterProvider:
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    return MeterProvider(metric_readers=[reader], shutdown_on_exit=False)


@contextmanager
def _outputs(directory: Path) -> Iterator[dict[str, Callable[[], dict[str, Any]]]]:
    """Yield per output the `configure()` arguments that attach it (and nothing else)."""
    with ExitStack() as stack:
        receiver = stack.enter_context(ChildReceiver())
        null = stack.enter_context(open("/dev/null", "w"))
        counter = iter(range(1_000_000))
        yield {
            "none": dict,
            "snapshot file": lambda: {"snapshot_file": directory / f"s{next(counter)}.jsonl"},
            "Prometheus, not scraped": lambda: {"prometheus": _free_port()},
            "OTLP metrics": lambda: {
                "otlp_endpoint": receiver.endpoint,
                "traces_exporter": "none",
                "metrics_exporter": "otlp",
            },
            "app MeterProvider": lambda: {
                "meter_provider": _app_meter_provider(ConsoleMetricExporter(out=null))
            },
        }


def reset_times(arguments: dict[str, Any], paths: int, laps: int, windows: int) -> list[float]:
    """Return the seconds each of `windows` `reset()` calls took, `laps` x `paths` a window."""
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        rank=looptrace.RankInfo(),
        trace_every=0,
        max_paths=paths + 10,
        **arguments,
    )
    names = [f"s{i}" for i in range(paths - 1)]  # and the timer itself
    record = lt.timer("train").record
    times = []
    try:
        for _ in range(windows):
            for _ in range(laps):
                for name in names:
                    record(name)
                record()
            t0 = time.perf_counter()
            lt.reset()
            times.append(time.perf_counter() - t0)
    finally:
        lt.shutdown()
    return times


def reset_with_outputs(windows: int) -> dict[str, dict[str, float]]:
    """Return per output and window shape the median and worst `reset()`, in ms."""
    result: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as directory, _outputs(Path(directory)) as outputs:
        for output, arguments in outputs.items():
            for shape, (paths, laps) in SHAPES.items():
                times = reset_times(arguments(), paths, laps, windows)
                result[f"{output}, {shape}"] = {
                    "median_ms": 1e3 * statistics.median(times),
                    "worst_ms": 1e3 * max(times),
                }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds")
    args = parser.parse_args(argv)
    print(json.dumps(reset_with_outputs(10 if args.quick else 100), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
