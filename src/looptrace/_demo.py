"""`looptrace demo`: a simulated training loop timed by looptrace, printed as a tree table."""

from __future__ import annotations

import random
from dataclasses import dataclass

from looptrace._configure import configure
from looptrace._ranks import RankInfo
from looptrace._snapshot import Snapshot
from looptrace._table import render_table
from looptrace.testing import FakeClock


@dataclass(frozen=True)
class DemoResult:
    """What a demo run produced: the last window's snapshot and the number of steps."""

    snapshot: Snapshot
    steps: int


class _Work:
    """Draws section durations from skewed (log-normal) distributions and spends them."""

    def __init__(self, clock: FakeClock, rng: random.Random) -> None:
        self._clock = clock
        self._rng = rng

    def spend(self, median_s: float, spread: float = 0.25, stall_p: float = 0.0) -> None:
        seconds = self._rng.lognormvariate(0.0, spread) * median_s
        if stall_p and self._rng.random() < stall_p:
            seconds *= self._rng.uniform(5, 20)  # a slow batch, a straggling read
        self._clock.advance(seconds)


def run_demo(steps: int = 300, seed: int = 0, reset_every: int = 100) -> DemoResult:
    """Time `steps` simulated training steps on simulated time; return the last window.

    The loop has data loading, a forward pass with an encoder and a decoder, backward and an
    optimizer step, an evaluation every 50 steps and a checkpoint every 100.
    """
    clock = FakeClock()
    work = _Work(clock, random.Random(seed))
    lt = configure("looptrace-demo", clock=clock, rank=RankInfo(), trace_every=1)
    train = lt.timer("training")
    forward = train.timer("forward")
    snapshot = lt.reset()
    for step in range(1, steps + 1):
        train.record("data")
        work.spend(0.012, spread=0.4, stall_p=0.02)
        train.record("forward")
        forward.record("encoder")
        work.spend(0.018)
        forward.record("decoder")
        work.spend(0.011)
        train.record("backward")
        work.spend(0.055, spread=0.15)
        with train.section("optimizer"):
            work.spend(0.006, spread=0.1)
        if step % 50 == 0:
            with train.section("eval"):
                work.spend(1.5, spread=0.05)
        if step % 100 == 0:
            with train.section("checkpoint"):
                work.spend(4.0, spread=0.3)
        train.record()
        if step % reset_every == 0:
            snapshot = lt.reset()
    train.stop()
    lt.shutdown()
    return DemoResult(snapshot=snapshot, steps=steps)


def demo_report(result: DemoResult) -> str:
    """Return the printed report: a title line and the tree table."""
    window = (result.snapshot.end_ns - result.snapshot.start_ns) / 1e9
    title = (
        f"looptrace demo: {result.steps} simulated training steps; "
        f"last window {window:.1f} s of simulated time"
    )
    return f"{title}\n\n{render_table(result.snapshot)}"
