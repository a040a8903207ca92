"""Instructions per section of bench.py's cases, counted by callgrind: robust on a busy machine.

Each case runs in a process of its own under `valgrind --tool=callgrind`, which counts only
while a step runs: the steps are called by `itertools.starmap`, whose C function toggles the
count, so imports, set-up and the warm-up window are not counted. A case's count, its share of
`reset()` included, is divided by 21 sections a step, as bench.py divides (a sections-only step
has 20 sections and no lap). The exporter thread of the default-sampling cases is not counted.
Run with `PYTHONHASHSEED=0` and one BLAS thread; the core is whichever `import looptrace` finds
(`PYTHONPATH`).

    python benchmarks/instructions.py                 # every case, a table
    python benchmarks/instructions.py record with     # some cases
    python benchmarks/instructions.py --cache         # with callgrind's cache model: I1 misses
    python benchmarks/instructions.py --keep DIR      # callgrind's profiles, per function
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from itertools import repeat, starmap
from pathlib import Path

from bench_cases import PER_STEP, Case, floor_case, looptrace_case

# bench.py's cases of the P1 and the section-only targets.
CASES: dict[str, Callable[[], Case]] = {
    "floor": floor_case,
    "record": lambda: looptrace_case("record", "none", {}, trace_every=0),
    "with": lambda: looptrace_case("section", "none", {}, trace_every=0),
    # A never-lapped timer's sections, each a step of its own; no exporter, so no slow-lap
    # exports, whose number depends on timing: a count that repeats.
    "sections-only": lambda: looptrace_case("sections-only", "none", {}, trace_every=0),
    "with, default sampling": lambda: looptrace_case("section", "discard", {}),
    "sections-only, default sampling": lambda: looptrace_case("sections-only", "discard", {}),
}
WARM_UP = 250  # steps, uncounted: the first 10 steps are traced by default, and a window


def run(case: str, steps: int) -> None:
    """Run `steps` counted steps of `case` after its warm-up."""
    made = CASES[case]()
    made.run(WARM_UP)
    made.flush()
    for _ in starmap(made.run, repeat((1,), steps)):  # counted: inside starmap's calls
        pass
    made.close()


def count(case: str, steps: int, cache: bool, keep: Path | None) -> tuple[int, int]:
    """Return (instructions, I1 misses or 0) of `steps` steps of `case`.

    `keep`: a folder for callgrind's profile of the case (`callgrind_annotate` reads it).
    """
    out = "/dev/null" if keep is None else str(keep / f"callgrind.{case.replace(' ', '')}.out")
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        "--collect-atstart=no",
        "--toggle-collect=starmap_next",
        *(["--cache-sim=yes"] if cache else []),
        sys.executable,
        __file__,
        "--run",
        case,
        str(steps),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(done.stderr[-2000:])
    misses = re.search(r"I1\s+misses:\s+([\d,]+)", done.stderr)
    return int(found[1]), int(misses[1].replace(",", "")) if misses else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"of {list(CASES)}; default all")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--cache", action="store_true", help="count I1 misses too")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the profiles there")
    parser.add_argument("--run", nargs=2, metavar=("CASE", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        run(args.run[0], int(args.run[1]))
        return 0
    import looptrace

    print(f"core: {Path(looptrace.__file__).parent}", flush=True)
    for case in args.cases or CASES:
        instructions, misses = count(case, args.steps, args.cache, args.keep)
        sections = args.steps * PER_STEP
        line = f"{case:34} {instructions / sections:8.0f} instructions/section"
        if args.cache:
            line += f" {misses / sections:6.1f} I1 misses/section"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
