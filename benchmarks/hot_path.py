"""The hot path's scaling figures: `reset()` per recorded section (P6) and many paths (P7).

Both are ratios taken within one run, cases interleaved, so drift and neighbours hit all alike.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

import looptrace

LAPS_PER_WINDOW = 100


def _floor_window(names: list[str]) -> Callable[[], int]:
    """The floor's window: a dict of [count, total_ns] per name; returns its sections."""
    stats: dict[str, list[int]] = {}

    def window() -> int:
        last = time.perf_counter_ns()
        for _ in range(LAPS_PER_WINDOW):
            for name in names:
                now = time.perf_counter_ns()
                entry = stats.get(name)
                if entry is None:
                    entry = stats[name] = [0, 0]
                entry[0] += 1
                entry[1] += now - last
                last = now
        return LAPS_PER_WINDOW * len(names)

    return window


def reset_cost(rounds: int, meter_provider: Callable[[], MeterProvider]) -> dict[str, float]:
    """P6: `reset()` alone, per recorded section (100 paths x 100 laps a window), x floor.

    Without and with an application MeterProvider, whose reader collects looptrace's
    aggregates at `reset()`; the floor's per-section cost is measured alongside. `reset()`
    leaves the grouping of the window's durations and each path's statistics to the first
    read of its snapshot, so reading every path's statistics is timed too, apart: what a
    loop that logs the window's numbers pays on its own thread.
    """
    names = [f"s{i}" for i in range(99)]  # and the timer itself: 100 paths
    meters = {"aggregate only": None, "app MeterProvider": meter_provider()}
    handles = {
        kind: looptrace.configure(
            tracer_provider=TracerProvider(),
            rank=looptrace.RankInfo(),
            trace_every=0,
            meter_provider=meter,
        )
        for kind, meter in meters.items()
    }
    floor = _floor_window(names)
    samples: dict[str, list[float]] = {"floor": [], **{kind: [] for kind in handles}}
    reads: dict[str, list[float]] = {kind: [] for kind in handles}
    rng = random.Random(6)
    for _ in range(rounds):
        for kind in rng.sample(list(samples), len(samples)):
            if kind == "floor":
                t0 = time.perf_counter_ns()
                sections = floor()
                samples[kind].append((time.perf_counter_ns() - t0) / sections)
                continue
            lt = handles[kind]
            record = lt.timer("train").record
            for _ in range(LAPS_PER_WINDOW):
                for name in names:
                    record(name)
                record()
            sections = LAPS_PER_WINDOW * (len(names) + 1)
            t0 = time.perf_counter_ns()
            snapshot = lt.reset()
            t1 = time.perf_counter_ns()
            for stats in snapshot.values():
                stats.p99  # noqa: B018 (reading it is what is timed)
            reads[kind].append((time.perf_counter_ns() - t1) / sections)
            samples[kind].append((t1 - t0) / sections)
    for lt in handles.values():
        lt.shutdown()
    for meter in meters.values():
        if meter is not None:
            meter.shutdown()
    medians = {kind: statistics.median(values) for kind, values in samples.items()}
    result = {f"{kind} ns/section": value for kind, value in medians.items()}
    for kind in handles:
        result[f"{kind} reset x floor section"] = medians[kind] / medians["floor"]
        read = statistics.median(reads[kind])
        result[f"{kind} read ns/section"] = read
        result[f"{kind} read x floor section"] = read / medians["floor"]
    return result


def path_count_cost(rounds: int, steps: int) -> dict[str, float]:
    """P7: `record()` per section with 1000 distinct paths x with 10, `reset()` included.

    Each sample also times its `reset()` calls alone, so that the ratio splits into what
    recording costs with many paths and what `reset()` adds per section it closes.
    """
    per_step = 20
    handles = {}
    for paths in (10, 1000):
        lt = looptrace.configure(
            tracer_provider=TracerProvider(),
            rank=looptrace.RankInfo(),
            trace_every=0,
            max_paths=2 * paths + 10,
        )
        names = [f"s{i}" for i in range(paths)]
        handles[paths] = (lt, names)
    samples: dict[int, list[float]] = {paths: [] for paths in handles}
    resets: dict[int, list[float]] = {paths: [] for paths in handles}
    counters = dict.fromkeys(handles, 0)
    rng = random.Random(7)
    clock = time.perf_counter_ns
    for _ in range(rounds):
        for paths in rng.sample(list(handles), len(handles)):
            lt, names = handles[paths]
            record = lt.timer("train").record
            at = counters[paths]
            in_reset = 0
            t0 = clock()
            for step in range(steps):
                for j in range(per_step):
                    record(names[(at + j) % paths])
                at += per_step
                record()
                if step % LAPS_PER_WINDOW == LAPS_PER_WINDOW - 1:
                    r0 = clock()
                    lt.reset()
                    in_reset += clock() - r0
            sections = steps * (per_step + 1)
            samples[paths].append((clock() - t0) / sections)
            resets[paths].append(in_reset / sections)
            counters[paths] = at
    for lt, _ in handles.values():
        lt.shutdown()
    medians = {paths: statistics.median(values) for paths, values in samples.items()}
    fastest = {paths: min(values) for paths, values in samples.items()}
    in_resets = {paths: statistics.median(values) for paths, values in resets.items()}
    return {
        "10 paths ns/section": medians[10],
        "1000 paths ns/section": medians[1000],
        "1000 x 10 paths": medians[1000] / medians[10],
        # Its medians move with the machine's speed and with how fragmented the heap is
        # (docs/performance.md); the fastest rounds move less.
        "1000 x 10 paths, fastest rounds": fastest[1000] / fastest[10],
        # The share of the per-section cost spent in reset() (medians over the samples).
        "10 paths reset() ns/section": in_resets[10],
        "1000 paths reset() ns/section": in_resets[1000],
    }
