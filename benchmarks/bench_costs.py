"""The measurements of benchmarks/bench.py besides the cases' table.

A realistic step, the metrics path at reset(), iterate(), memory over many sections and many
names, the sketch's quantile error, and OTLP export throughput.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from bench_cases import (
    NAMES,
    PER_STEP,
    RESET_EVERY,
    Sinks,
    floor_case,
    looptrace_case,
    tracer_provider,
)
from opentelemetry.sdk.trace import TracerProvider
from tests.helpers.otlp_server import OtlpReceiver

import looptrace
from looptrace._core.clock import ManualClock
from looptrace._stats.aggregator import Aggregator

LAYERS = [f"layer{i}" for i in range(8)]
GRADIENT_BUCKETS = [f"bucket{i}" for i in range(6)]
STEP_S = 0.01  # the realistic step's own work, in time a manual clock is moved on by


def realistic_step_cost(steps: int, rounds: int) -> dict[str, float]:
    """CPU time the instrumentation adds to a realistic 10 ms step at the default configuration.

    The step's work is 10 ms on a manual clock, so every lap lasts 10 ms and the slow-lap
    judgement sees a steady training loop. With the real clock and no work, any stall of the
    machine over 1 ms makes an empty step "slow", and it is exported, which no 10 ms step
    would be; that figure is reported too (`real_clock_cpu_ns_per_step`). A manual clock
    reading is a Python call, dearer than the real clock's, so the figure errs high. The CPU
    time is the whole process's (the export thread included), fastest of `rounds`, less that
    of the same loop moving the clock only.
    """
    provider = tracer_provider("discard", {})
    clock = ManualClock()
    lt = looptrace.configure(tracer_provider=provider, rank=looptrace.RankInfo(), clock=clock)
    real = looptrace.configure(tracer_provider=provider, rank=looptrace.RankInfo())

    def stepper(handle: looptrace.Looptrace) -> Callable[[], None]:
        """Return one step timed by `handle`: 20 sections, some nested, and the lap."""
        train = handle.timer("train")
        forward, backward = train.timer("forward"), train.timer("backward")

        def one_step() -> None:
            train.record("data")
            train.record("forward")
            for layer in LAYERS:
                forward.record(layer)
            train.record("backward")
            for bucket in GRADIENT_BUCKETS:
                backward.record(bucket)
            with train.section("optimizer"):
                pass
            with train.section("zero_grad"):
                pass
            train.record("log")
            train.record()

        return one_step

    def run(handle: looptrace.Looptrace | None, count: int) -> float:
        """Run `count` steps (None: only move the clock); return the CPU time per step in ns."""
        step = None if handle is None else stepper(handle)
        cpu0 = time.process_time_ns()
        for i in range(count):
            clock.advance(STEP_S)
            if step is not None and handle is not None:
                step()
                if i % RESET_EVERY == RESET_EVERY - 1:
                    handle.reset()
        provider.force_flush()
        return (time.process_time_ns() - cpu0) / count

    for handle in (lt, real):
        run(handle, 2 * RESET_EVERY)  # warm up past the first traced steps
    manual, bare, real_clock = [], [], []
    for _ in range(rounds):
        manual.append(run(lt, steps))
        bare.append(run(None, steps))
        real_clock.append(run(real, steps))
    lt.shutdown()
    real.shutdown()
    provider.shutdown()
    cpu = min(manual) - min(bare)
    return {
        "step_s": STEP_S,
        "cpu_ns_per_step": cpu,
        "overhead_pct_of_10ms_step": 100 * cpu / (STEP_S * 1e9),
        "real_clock_cpu_ns_per_step": min(real_clock) - min(bare),
    }


def metrics_reset_cost(rounds: int, sinks: Sinks) -> dict[str, float]:
    """Per recorded section, a reset window's whole cost (100 steps and their reset()), x floor.

    Aggregate only, with an application MeterProvider (its reader collects looptrace's
    aggregates at reset()), and the former path (`Histogram.record` per duration), interleaved.
    """
    cases = {
        "floor": floor_case(),
        "aggregate only": looptrace_case("record", "none", sinks, trace_every=0),
        "app MeterProvider": looptrace_case("record", "none", sinks, "reader", trace_every=0),
        "former per-value": looptrace_case("record", "none", sinks, "per-value", trace_every=0),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    rng = random.Random(1)
    for case in cases.values():  # warm-up: one window each
        case.run(RESET_EVERY)
    for _ in range(rounds):
        for name in rng.sample(list(cases), len(cases)):
            t0 = time.perf_counter_ns()
            cases[name].run(RESET_EVERY)  # ends with exactly one reset() for looptrace
            samples[name].append((time.perf_counter_ns() - t0) / (RESET_EVERY * PER_STEP))
    for case in cases.values():
        case.close()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    result = {f"{name} ns/section": value for name, value in medians.items()}
    result.update({f"{name} x floor": value / medians["floor"] for name, value in medians.items()})
    return result


def iterate_cost(items: int, rounds: int) -> dict[str, float]:
    """Per-item cost of `train.iterate(loader)` against the same lap and `data` by hand.

    Aggregate only, a reset every 100 items, the three loops interleaved in random order each
    round over a list (the loader's own cost is the bare loop).
    """
    lt = looptrace.configure(
        tracer_provider=TracerProvider(), rank=looptrace.RankInfo(), trace_every=0
    )
    loader = list(range(items))

    def bare() -> None:
        for _ in loader:
            pass

    def by_hand() -> None:
        train = lt.timer("by_hand")
        record = train.record
        for i, _ in enumerate(loader):
            record()
            record("data")
            record("data")  # stands for the first section of the body, which ends `data`
            if i % RESET_EVERY == RESET_EVERY - 1:
                lt.reset()
        train.stop()

    def iterated() -> None:
        train = lt.timer("iterated")
        record = train.record
        for i, _ in enumerate(train.iterate(loader)):
            record("data")  # the same first section of the body
            if i % RESET_EVERY == RESET_EVERY - 1:
                lt.reset()

    loops = {"bare": bare, "by_hand": by_hand, "iterate": iterated}
    samples: dict[str, list[float]] = {name: [] for name in loops}
    rng = random.Random(1)
    for _ in range(rounds):
        for name in rng.sample(list(loops), len(loops)):
            t0 = time.perf_counter_ns()
            loops[name]()
            samples[name].append((time.perf_counter_ns() - t0) / items)
    lt.shutdown()
    median = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "bare_ns_per_item": median["bare"],
        "by_hand_ns_per_item": median["by_hand"],
        "iterate_ns_per_item": median["iterate"],
        "iterate_x_by_hand": (median["iterate"] - median["bare"])
        / (median["by_hand"] - median["bare"]),
    }


def count_cost(calls: int, rounds: int) -> dict[str, float]:
    """Per-call cost of `train.count("tokens", n)` beside `record()` (a lap) and an empty loop.

    `count_flops` is the same count with its FLOPs per unit (`flops_per_unit=`, for MFU).

    Aggregate only, a reset every 100 calls, the loops interleaved in random order each round.
    The target: a count costs at most one `record()`.
    """
    lt = looptrace.configure(
        tracer_provider=TracerProvider(), rank=looptrace.RankInfo(), trace_every=0
    )
    train = lt.timer("count_cost")

    def bare() -> None:
        for i in range(calls):
            if i % RESET_EVERY == RESET_EVERY - 1:
                pass

    def recorded() -> None:
        record = train.record
        for i in range(calls):
            record()
            if i % RESET_EVERY == RESET_EVERY - 1:
                lt.reset()
        train.stop()

    def counted() -> None:
        count = train.count
        for i in range(calls):
            count("tokens", 512)
            if i % RESET_EVERY == RESET_EVERY - 1:
                lt.reset()

    def priced() -> None:
        count = train.count
        for i in range(calls):
            count("tokens", 512, flops_per_unit=6e9)
            if i % RESET_EVERY == RESET_EVERY - 1:
                lt.reset()

    loops = {"bare": bare, "record": recorded, "count": counted, "count_flops": priced}
    samples: dict[str, list[float]] = {name: [] for name in loops}
    rng = random.Random(2)
    for _ in range(rounds):
        for name in rng.sample(list(loops), len(loops)):
            t0 = time.perf_counter_ns()
            loops[name]()
            samples[name].append((time.perf_counter_ns() - t0) / calls)
    lt.shutdown()
    median = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "bare_ns_per_call": median["bare"],
        "record_ns_per_call": median["record"],
        "count_ns_per_call": median["count"],
        "count_flops_ns_per_call": median["count_flops"],
        "count_x_record": (median["count"] - median["bare"]) / (median["record"] - median["bare"]),
    }


def rss_growth(sections: int) -> dict[str, float]:
    """RSS growth over `sections` aggregated sections, measured in a fresh interpreter."""
    code = f"""
import looptrace, resource
from opentelemetry.sdk.trace import TracerProvider
lt = looptrace.configure(tracer_provider=TracerProvider(), trace_every=0,
                         rank=looptrace.RankInfo())
train = lt.timer("train")
names = {list(NAMES)!r}
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
for _ in range(200):
    for n in names: train.record(n)
    train.record()
lt.reset()
before = rss()
for step in range({sections} // {PER_STEP}):
    for n in names: train.record(n)
    train.record()
after_loop = rss()
lt.reset()
print(before, after_loop, rss())
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    before, after_loop, after_reset = (int(x) for x in out)
    return {
        "sections": sections,
        "rss_growth_mb": (max(after_loop, after_reset) - before) / 1024,
    }


def distinct_names(names: int) -> dict[str, float]:
    """RSS growth over `names` distinct section names, and reset() cost before and after."""
    code = f"""
import looptrace, time
from opentelemetry.sdk.trace import TracerProvider
lt = looptrace.configure(tracer_provider=TracerProvider(), trace_every=0,
                         rank=looptrace.RankInfo())
train = lt.timer("train")
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
def reset_ns():
    for n in {list(NAMES)!r}: train.record(n)
    t0 = time.perf_counter_ns(); lt.reset(); return time.perf_counter_ns() - t0
reset_before = min(reset_ns() for _ in range(20))
before = rss()
for i in range({names}):
    train.record(f"name{{i}}")
train.stop()
lt.reset()
print(before, rss(), reset_before, min(reset_ns() for _ in range(20)))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    before, after, reset_before, reset_after = (int(x) for x in out)
    return {
        "names": names,
        "rss_growth_mb": (after - before) / 1024,
        "reset_us_before": reset_before / 1000,
        "reset_us_after": reset_after / 1000,
    }


def sketch_error(n: int) -> dict[str, float]:
    """Relative error of p50/p90/p99 against exact quantiles on log-normal durations."""
    import numpy as np

    rng = np.random.default_rng(0)
    values = np.maximum(1, rng.lognormal(mean=np.log(5e6), sigma=1.2, size=n)).astype(np.int64)
    aggregator = Aggregator()
    aggregator.merge("x", values.tolist(), 0, 0)
    stats = aggregator.snapshot(start_ns=0, end_ns=1, rank=0)["x"]
    result = {}
    for q, got in (("p50", stats.p50), ("p90", stats.p90), ("p99", stats.p99)):
        exact = float(np.quantile(values, float(q[1:]) / 100, method="inverted_cdf")) / 1e9
        result[f"{q}_rel_error"] = abs(got - exact) / exact
    return result


def export_throughput(steps: int) -> dict[str, float]:
    """Spans per second from looptrace through BatchSpanProcessor + OTLP/gRPC to a receiver.

    The receiver is its own, in this process, where its span count can be read.
    """
    with OtlpReceiver("grpc", keep_spans=False) as sink:
        return _export_to(steps, sink)


def _export_to(steps: int, sink: OtlpReceiver) -> dict[str, float]:
    before = sink.span_count
    provider = tracer_provider("otlp", {"otlp": sink})
    lt = looptrace.configure(tracer_provider=provider, trace_every=1, rank=looptrace.RankInfo())
    train = lt.timer("train")
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        for name in NAMES:
            train.record(name)
        train.record()
    train.stop()
    provider.force_flush()
    elapsed = (time.perf_counter_ns() - t0) / 1e9
    delivered = sink.span_count - before
    lt.shutdown()
    provider.shutdown()
    return {"spans_delivered": delivered, "spans_per_s": delivered / elapsed}
