"""Per-section overhead of looptrace, side by side with a floor, codetiming and the raw SDK.

One process, one run, cases interleaved in random order each round so drift hits all alike.
A "section" is one timed interval; each step is 20 sections plus the step lap (21 intervals).
Every case pays for what it causes: looptrace's cases include their share of `reset()` (one
per 100 steps), and the CPU column includes the exporter thread's work up to a final flush.
The OTLP receiver runs in a child process, so that only the exporting process's CPU is counted.

    python benchmarks/bench.py            # full run, table on stdout, JSON beside it
    python benchmarks/bench.py --quick    # a few seconds; what CI runs to keep it working
    python benchmarks/bench.py --slow-laps 40   # only slow-lap recording on vs off
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench_cases import (
    PER_STEP,
    Case,
    Sinks,
    app_meter_provider,
    codetiming_case,
    floor_case,
    floor_with_case,
    looptrace_case,
    peer_case,
    raw_sdk_case,
)
from bench_costs import (
    count_cost,
    distinct_names,
    export_throughput,
    iterate_cost,
    metrics_reset_cost,
    realistic_step_cost,
    rss_growth,
    sketch_error,
)
from bench_instrument import instrument_cost
from bench_report import print_report, targets_of
from bench_slow_laps import slow_lap_cost
from hot_path import path_count_cost, reset_cost
from otlp_sink import ChildReceiver
from peers import megatron, record_function
from reset_outputs import reset_with_outputs
from tests.helpers.otlp_server import StalledServer

from looptrace._core.build import core_kind


def time_cases(cases: list[Case], rounds: int, steps: int) -> None:
    """Warm each case up, then time `rounds` samples of `steps` steps, in random order per round."""
    rng = random.Random(0)
    for case in cases:  # warm-up
        case.run(max(2, steps // 10))
        case.flush()
    gc.collect()
    for _ in range(rounds):
        for case in rng.sample(cases, len(cases)):
            cpu0, t0 = time.process_time_ns(), time.perf_counter_ns()
            case.run(steps)
            wall = time.perf_counter_ns() - t0
            if "stalled" not in case.name:
                case.flush()
            cpu = time.process_time_ns() - cpu0
            case.wall.append(wall / (steps * PER_STEP))
            case.cpu.append(cpu / (steps * PER_STEP))


def rows_of(cases: list[Case]) -> list[dict[str, Any]]:
    """Return the table: per case the median, range and CPU per section, x floor, x raw SDK."""
    floor = statistics.median(cases[0].wall)
    raw = {c.name: statistics.median(c.cpu) for c in cases if c.name.startswith("raw SDK")}
    rows = []
    for case in cases:
        median = statistics.median(case.wall)
        cpu = statistics.median(case.cpu)
        kind = case.name.rsplit(", ", 1)[-1]
        raw_ref = raw.get(f"raw SDK spans, {kind}")
        rows.append(
            {
                "case": case.name,
                "median_ns": median,
                "min_ns": min(case.wall),
                "max_ns": max(case.wall),
                "cpu_ns": cpu,
                "x_floor": median / floor,
                "cpu_x_raw_sdk": (cpu / raw_ref) if raw_ref and "traced" in case.name else None,
            }
        )
    return rows


def timed_rows(rounds: int, steps: int) -> list[dict[str, Any]]:
    """Build the cases, time them (`time_cases`) and return their table (`rows_of`)."""
    with ExitStack() as stack:
        receiver = stack.enter_context(ChildReceiver())
        stalled = StalledServer()
        stack.callback(stalled.close)
        sinks: Sinks = {"otlp": receiver, "stalled": stalled}
        factories: list[Callable[[], Case | None]] = [
            floor_case,
            floor_with_case,
            codetiming_case,
            lambda: peer_case(megatron),
            lambda: peer_case(record_function),
            lambda: raw_sdk_case("discard", sinks),
            lambda: raw_sdk_case("otlp", sinks),
            lambda: looptrace_case("record", "none", sinks, trace_every=0),
            lambda: looptrace_case("section", "none", sinks, trace_every=0),
            lambda: looptrace_case("record", "discard", sinks, trace_every=1),
            lambda: looptrace_case("section", "discard", sinks, trace_every=1),
            lambda: looptrace_case("record", "otlp", sinks, trace_every=1),
            lambda: looptrace_case("record", "stalled", sinks, trace_every=1),
            lambda: looptrace_case("record", "stalled", sinks, trace_every=0),
            lambda: looptrace_case("section", "discard", sinks),
            lambda: looptrace_case("sections-only", "discard", sinks),
        ]
        cases = [case for case in (make() for make in factories) if case is not None]
        for case in cases:
            stack.callback(case.close)
        time_cases(cases, rounds, steps)
        return rows_of(cases)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds, for CI")
    parser.add_argument("--json", type=Path, default=Path(__file__).with_name("results.json"))
    parser.add_argument(
        "--slow-laps", type=int, metavar="ROUNDS", help="only the slow-lap recording figure"
    )
    args = parser.parse_args(argv)
    if args.slow_laps:
        print(json.dumps(slow_lap_cost(args.slow_laps, {}), indent=2))
        return 0
    # The stalled receiver makes the OTLP exporter time out by design; its error log would
    # only clutter the table.
    logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter").setLevel(logging.CRITICAL)
    rounds, steps = (3, 20) if args.quick else (15, 200)
    rows = timed_rows(rounds, steps)

    extra = {
        "realistic_step": realistic_step_cost(*((200, 1) if args.quick else (2000, 5))),
        "rss": rss_growth(100_000 if args.quick else 1_000_000),
        "names": distinct_names(20_000 if args.quick else 200_000),
        "sketch": sketch_error(100_000 if args.quick else 1_000_000),
        "export": export_throughput(50 if args.quick else 500),
        "iterate": iterate_cost(1_000 if args.quick else 20_000, 5 if args.quick else 15),
        "count": count_cost(2_000 if args.quick else 50_000, 5 if args.quick else 15),
        "metrics_reset": metrics_reset_cost(3 if args.quick else 30, {}),
        "slow_laps": slow_lap_cost(5 if args.quick else 40, {}),
        "reset": reset_cost(3 if args.quick else 30, app_meter_provider),
        "reset_outputs": reset_with_outputs(10 if args.quick else 100),
        "paths": path_count_cost(3 if args.quick else 15, 100 if args.quick else 300),
        "instrument": instrument_cost(*((100, 3) if args.quick else (2_000, 15))),
    }

    targets = targets_of(rows, extra)
    print_report(rows, extra, targets)
    core = core_kind()
    print(f"\nmeasured on the {core} core (users' figures come from the compiled one)")
    result = {
        "python": sys.version.split()[0],
        "core": core,
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "rounds": rounds,
        "steps_per_sample": steps,
        "floor_median_x_fastest": rows[0]["median_ns"] / rows[0]["min_ns"],
        "cases": rows,
        "targets": targets,
        **extra,
    }
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
