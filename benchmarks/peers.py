"""The timers looptrace is compared with, each timing the benchmark's step the way its users do.

Each factory returns `(name, run)`, `run(steps)` timing `steps` steps of `sections` sections plus
the step itself, or None when the peer is not installed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

Run = Callable[[int], None]


class MegatronTimer:
    """Megatron-LM's `Timer` as its training loop drives it (no device barrier on the CPU)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.elapsed = 0.0
        self.started = False
        self.start_time = time.time()

    def start(self, barrier: bool = False) -> None:
        assert not self.started, f"timer {self.name} has already been started"
        self.start_time = time.time()
        self.started = True

    def stop(self, barrier: bool = False) -> None:
        assert self.started, f"timer {self.name} is not started"
        self.elapsed += time.time() - self.start_time
        self.started = False


class MegatronTimers:
    """Megatron-LM's `Timers`: `timers(name, log_level)` returns the named timer (made once)."""

    def __init__(self, log_level: int = 2) -> None:
        self.log_level = log_level
        self.timers: dict[str, MegatronTimer] = {}
        self.dummy = MegatronTimer("dummy")

    def __call__(self, name: str, log_level: int = 0) -> MegatronTimer:
        if log_level > self.log_level:
            return self.dummy
        timer = self.timers.get(name)
        if timer is None:
            timer = self.timers[name] = MegatronTimer(name)
        return timer


def megatron(sections: Sequence[str]) -> tuple[str, Run]:
    """Megatron-style timers: `timers(name).start()` / `.stop()` around each section."""
    timers = MegatronTimers()

    def run(steps: int) -> None:
        for _ in range(steps):
            timers("step").start()
            for name in sections:
                timers(name).start()
                timers(name).stop()
            timers("step").stop()

    return "Megatron-style timers", run


def record_function(sections: Sequence[str]) -> tuple[str, Run] | None:
    """`torch.profiler.record_function` around each section, with no profiler running."""
    try:
        from torch.profiler import record_function as ranged
    except ImportError:
        return None

    def run(steps: int) -> None:
        for _ in range(steps):
            with ranged("step"):
                for name in sections:
                    with ranged(name):
                        pass

    return "torch record_function, no profiler", run
