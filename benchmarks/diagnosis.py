"""What reading a window's diagnosis costs: `Snapshot.diagnosis()` at 10, 100 and 1,000 paths.

A looptrace on a fake clock runs 100 laps of one timer through sections nested two levels
deep (10 paths: 3 sections of 2 children, and the timer; 100 paths: 11 of 8; 1,000: 37 of
26), then closes the window. Timed: `diagnosis()` on a window whose statistics were already
read (as after the snapshot file's writer), and on a fresh window (the statistics computed
too; `diagnosis()` is often the first reader). The goal: at most 1 ms at 100 paths.

Run: `python benchmarks/diagnosis.py [--quick]`; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from looptrace import Snapshot
from looptrace.testing import capture

SHAPES = {10: (3, 2), 100: (11, 8), 1000: (37, 26)}  # paths: (sections, children each)
LAPS = 100


def window(paths: int) -> Snapshot:
    """Return a closed window of `paths` paths (100 laps, a data section among them)."""
    sections, children = SHAPES[paths]
    cap = capture(trace_every=0)
    timer = cap.lt.timer("train")
    for _ in range(LAPS):
        timer.record()
        for s in range(sections):
            name = "data" if s == 0 else f"s{s}"
            timer.record(name)
            child = timer.timer(name)
            for c in range(children):
                child.record(f"c{c}")
                cap.clock.advance(0.0001)
    timer.stop()
    snapshot = cap.lt.reset()
    cap.lt.shutdown()
    return snapshot


def median_us(snapshots: list[Snapshot], warm: bool) -> float:
    """Return the median µs of `diagnosis()` over `snapshots` (read first when `warm`)."""
    samples = []
    for snapshot in snapshots:
        if warm:
            list(snapshot.values())
        t0 = time.perf_counter_ns()
        snapshot.diagnosis()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(samples)


def main() -> None:
    """Print the median cost of a window's diagnosis at each size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer windows per size")
    args = parser.parse_args()
    count = 5 if args.quick else 21
    result = {}
    for paths in SHAPES:
        snapshots = [window(paths) for _ in range(count)]
        actual = len(snapshots[0])
        result[f"{actual} paths"] = {
            "read_us": round(median_us(snapshots, warm=True), 1),
            "fresh_us": round(median_us([window(paths) for _ in range(count)], warm=False), 1),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
