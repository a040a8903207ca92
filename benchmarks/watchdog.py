"""What the hang watchdog costs: one look, and the CPU of its thread beside a running loop.

Usage: ``python benchmarks/watchdog.py [SECONDS]``. Prints JSON:

- `look_us`: one look (read every thread's open sections, judge the steps, re-aim the
  stacks alarm) with 1 and with 8 threads each in a step of 3 nested sections, the median of
  2,000 looks; the alarm is re-aimed at every look (a new step each second: its worst case).
- `thread_cpu_share`: the watchdog thread's own CPU time (`time.thread_time` read inside it,
  before and after) over the wall time, while the main thread runs a loop of 5 ms steps for
  SECONDS (default 30): the share of one core it takes. The loop's own time does not count.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time

import looptrace
from looptrace._export.watchdog import Watchdog


def look_cost(threads: int, looks: int = 2000) -> float:
    """Return the median microseconds of one look with `threads` threads in a step."""
    lt = looptrace.configure(traces_exporter="none", metrics_exporter="none", hang_after=3600)
    engine = lt._engine
    ready, done = threading.Barrier(threads + 1), threading.Event()

    def step() -> None:
        train = lt.timer("train")
        train.record("forward")
        train.timer("forward").record("encoder")
        ready.wait()
        done.wait()

    workers = [threading.Thread(target=step) for _ in range(threads)]
    for worker in workers:
        worker.start()
    ready.wait()
    watchdog = next(c.__self__ for c in lt._outputs.on_close if isinstance(c.__self__, Watchdog))
    samples = []
    for index in range(looks):
        watchdog.alarm._armed = index  # (a new deadline at every look: re-armed)
        t0 = time.perf_counter_ns()
        watchdog.look()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    done.set()
    for worker in workers:
        worker.join()
    lt.shutdown()
    del engine
    return statistics.median(samples)


def thread_share(seconds: float) -> float:
    """Return the watchdog thread's CPU time over the wall time beside a 5 ms-step loop."""
    used: list[float] = []
    original = Watchdog._run

    def measured(self: Watchdog) -> None:
        start = time.thread_time()
        try:
            original(self)
        finally:
            used.append(time.thread_time() - start)

    Watchdog._run = measured  # type: ignore[method-assign]
    lt = looptrace.configure(traces_exporter="none", metrics_exporter="none", hang_after=3600)
    train = lt.timer("train")
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        train.record("data")
        time.sleep(0.002)
        train.record("forward")
        time.sleep(0.003)
        train.record()
    wall = time.monotonic() - t0
    lt.shutdown()  # stops the thread: its CPU time is recorded
    Watchdog._run = original  # type: ignore[method-assign]
    return used[0] / wall


def main() -> None:
    """Print the figures as JSON."""
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    print(
        json.dumps(
            {
                "python": sys.version.split()[0],
                "look_us": {"1 thread": look_cost(1), "8 threads": look_cost(8)},
                "thread_cpu_share": thread_share(seconds),
                "seconds": seconds,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
