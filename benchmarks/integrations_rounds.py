"""The rounds of benchmarks/integrations.py: every case once per round, in random order."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable


def median_of(rounds: int, cases: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Run every case once per round in random order; return each case's median."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        order = list(cases)
        random.shuffle(order)
        for name in order:
            samples[name].append(cases[name]())
    return {name: statistics.median(values) for name, values in samples.items()}
