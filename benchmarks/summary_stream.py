"""Time and peak memory of `looptrace summary` of snapshot files, by the number of windows.

Writes snapshot files as `offline_job.py` lays them out (one rank that resets every step:
10^4 and 10^5 windows; a 1,024-rank hour: about 37,000 windows of 21 paths in 1,024 files;
and larger ones with `--large`), then runs `looptrace summary` of each under
`/usr/bin/time -v` (where it is) in a process of its own: wall time and max RSS. `--src`
names the `src` folder to import looptrace from, to measure another commit's code on the
same files (`git archive <commit> src | tar -x -C /tmp/base`).

    python benchmarks/summary_stream.py                       # this tree's src
    python benchmarks/summary_stream.py --src /tmp/base/src   # another commit's
    python benchmarks/summary_stream.py --large               # also 3 * 10^5 windows, 4,096 ranks
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from offline_job import WINDOW_S, _window_line

_HERE = Path(__file__).resolve().parent


def write_ranks(directory: Path, ranks: int, seconds: float, seed: int = 0) -> int:
    """Write every rank's snapshot file of `seconds` of a job; return the windows written."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    windows = int(seconds / WINDOW_S)
    for rank in range(ranks):
        with (directory / f"snapshots.rank{rank}.jsonl").open("wb") as handle:
            for index in range(windows):
                handle.write(_window_line(rank, ranks, index, rng))
    return ranks * windows


def write_one_rank(path: Path, windows: int, seed: int = 0) -> int:
    """Write one rank's snapshot file of `windows` windows (a job that resets every step)."""
    rng = random.Random(seed)
    with path.open("wb") as handle:
        for index in range(windows):
            handle.write(_window_line(0, 1, index, rng))
    return windows


def summary(src: Path, target: str, limit_s: float) -> dict[str, Any]:
    """Run `looptrace summary target`; return its wall time, max RSS and exit status."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    timer = ["/usr/bin/time", "-v"] if shutil.which("/usr/bin/time") else []
    argv = [*timer, sys.executable, "-m", "looptrace", "summary", target]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, check=False, env=env, timeout=limit_s
        )
    except subprocess.TimeoutExpired:
        return {"timed_out_after_s": limit_s}
    seconds = time.perf_counter() - start
    found: dict[str, Any] = {"rc": done.returncode, "s": round(seconds, 2)}
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if rss:
        found["max_rss_mb"] = round(int(rss[1]) / 1024, 1)
    if done.returncode:
        found["stderr"] = done.stderr[-500:]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=_HERE.parent / "src")
    parser.add_argument("--large", action="store_true", help="also the largest cases")
    parser.add_argument("--limit-s", type=float, default=600.0)
    parser.add_argument("--keep", type=Path, help="write the files here and keep them")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.src))
    from looptrace._core.build import core_kind

    results: dict[str, Any] = {"src": str(args.src), "core": core_kind()}
    root = args.keep or Path(tempfile.mkdtemp(prefix="looptrace-summary-"))
    try:
        cases: list[tuple[str, str, int]] = []
        for windows in (10_000, 100_000) + ((300_000,) if args.large else ()):
            path = root / f"one_rank_{windows}.jsonl"
            if not path.exists():
                write_one_rank(path, windows)
            cases.append((f"1 rank, {windows} windows", str(path), windows))
        for ranks in (1024,) + ((4096,) if args.large else ()):
            job = root / f"ranks_{ranks}"
            if not job.exists():
                write_ranks(job, ranks, 3600.0)
            windows = ranks * int(3600.0 / WINDOW_S)
            cases.append((f"{ranks} ranks, 1 h", str(job / "snapshots.rank*.jsonl"), windows))
        for name, target, windows in cases:
            results[name] = {"windows": windows, **summary(args.src, target, args.limit_s)}
            print(name, results[name], flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
