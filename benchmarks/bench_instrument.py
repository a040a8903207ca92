"""Per-step cost of `looptrace.integrations.torch.instrument()` on a small PyTorch loop.

The loop (a DataLoader over a list in the main process, a 4-layer MLP of 5 module calls, a
loss, backward, an SGD step) runs plain, timed by hand (`iterate` and three sections, the
same four sections and lap), instrumented (`instrument(lt)`: every class patched,
the optimizers' global hooks), and instrumented with `model=` and `optimizer=` (only those
classes, per-optimizer hooks); interleaved in random order each round, a window closed every
100 steps. The cost is the median per-step difference to the plain loop, hooks included.

    python benchmarks/bench_instrument.py [STEPS] [ROUNDS]
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from typing import Any

import torch
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace.integrations.torch import instrument

TEN_MS_NS = 10_000_000  # the step of the overhead target (P3: <= 0.25 % of it)


def _loop(steps: int) -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU()
    )
    items = [(torch.randn(16), torch.randn(16)) for _ in range(steps)]
    loader = torch.utils.data.DataLoader(items, batch_size=1)
    return model, torch.optim.SGD(model.parameters(), lr=0.01), loader


def instrument_cost(steps: int, rounds: int) -> dict[str, float]:
    """Return the per-step ns of the plain loop and the extra ns of each instrumented form."""
    lt = looptrace.configure(
        tracer_provider=TracerProvider(), rank=looptrace.RankInfo(), trace_every=0
    )
    model, optimizer, loader = _loop(steps)

    def run() -> None:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    def by_hand() -> None:
        train = lt.timer("by_hand")
        for step, (x, y) in enumerate(train.iterate(loader)):
            with train.section("forward"):
                out = model(x)
            loss = torch.nn.functional.mse_loss(out, y)
            with train.section("backward"):
                loss.backward()
            with train.section("optimizer"):
                optimizer.step()
            optimizer.zero_grad()
            if step % 100 == 99:
                lt.reset()

    def patched(**options: Any) -> Any:
        def timed() -> None:
            handle = instrument(lt, reset_every=100, **options)
            try:
                run()
            finally:
                handle.uninstrument()

        return timed

    loops = {
        "plain": run,
        "by_hand": by_hand,
        "instrumented": patched(),
        "given": patched(model=model, optimizer=optimizer),
    }
    samples: dict[str, list[float]] = {name: [] for name in loops}
    rng = random.Random(1)
    run()  # warm up
    for _ in range(rounds):
        for name in rng.sample(list(loops), len(loops)):
            start = time.perf_counter_ns()
            loops[name]()
            samples[name].append((time.perf_counter_ns() - start) / steps)
    lt.shutdown()
    median = {name: statistics.median(values) for name, values in samples.items()}
    extra = median["instrumented"] - median["plain"]
    given = median["given"] - median["plain"]
    return {
        "plain_ns_per_step": median["plain"],
        "by_hand_extra_ns_per_step": median["by_hand"] - median["plain"],
        "instrumented_extra_ns_per_step": extra,
        "given_extra_ns_per_step": given,
        "instrumented_pct_of_10ms_step": 100 * extra / TEN_MS_NS,
        "given_pct_of_10ms_step": 100 * given / TEN_MS_NS,
    }


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    print(json.dumps(instrument_cost(steps, rounds), indent=2))
