"""Slow-lap recording on and off: what watching every untraced step for slowness costs."""

from __future__ import annotations

import random
import statistics
import time

from bench_cases import PER_STEP, RESET_EVERY, Sinks, looptrace_case


def slow_lap_cost(rounds: int, sinks: Sinks) -> dict[str, float]:
    """Per-section cost of `record()` with slow-lap recording on and off (`None`).

    Aggregate only (nothing reads spans: nothing is recorded, one check per section); and
    untraced steps with a discarding exporter (`trace_every=0`), where every step is
    recorded: with a factor no step reaches (the recording alone) and with the default 3,
    where the steps of this empty loop are so short that noise makes some "slow" and the
    window budget's exports (the 3 worst of every 60 steps) show. A reset every 100 steps,
    cases interleaved.
    """
    factors = {"on": 3.0, "never slow": 1e9, "off": None}
    cases = {
        f"{kind} {state}": looptrace_case(
            "record", kind, sinks, trace_every=0, slow_lap_factor=factors[state]
        )
        for kind, states in (("none", ("on", "off")), ("discard", ("on", "never slow", "off")))
        for state in states
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    rng = random.Random(2)
    for case in cases.values():  # warm-up: one window each, past the first 10 laps
        case.run(RESET_EVERY)
    for _ in range(rounds):
        for name in rng.sample(list(cases), len(cases)):
            t0 = time.perf_counter_ns()
            cases[name].run(RESET_EVERY)
            samples[name].append((time.perf_counter_ns() - t0) / (RESET_EVERY * PER_STEP))
    for case in cases.values():
        case.close()
    median = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "aggregate_only_on_ns": median["none on"],
        "aggregate_only_off_ns": median["none off"],
        "aggregate_only_on_x_off": median["none on"] / median["none off"],
        "recorded_ns": median["discard never slow"],
        "recorded_exported_ns": median["discard on"],
        "recorded_off_ns": median["discard off"],
        "recorded_x_off": median["discard never slow"] / median["discard off"],
        "recorded_exported_x_off": median["discard on"] / median["discard off"],
    }
