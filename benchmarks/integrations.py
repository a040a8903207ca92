"""Per-step overhead of each integration against the same loop without it, on the CPU.

Cases of one comparison run in one process, interleaved in random order each round, and the
table shows medians over rounds; read the differences and ratios, not the absolute times (the
development machine is shared and drifts). Times are the process's CPU time (torch on one
thread), which other processes on a busy machine disturb far less than wall time; the loggers'
are wall time, since W&B and MLflow work in other processes and threads. Needs the
`integrations` extra.

    python benchmarks/integrations.py                      # everything, table on stdout
    python benchmarks/integrations.py --only gate,lightning
    python benchmarks/integrations.py --baseline 2139cfe   # the range gate: this tree vs a commit

- gate: one `record()` section (aggregate only) with torch imported and no profiler running,
  in this tree and, with `--baseline REV`, in the source of that commit (subprocesses,
  alternating), so the cost of the profiler-range check is measured, not assumed.
- ranges: one section while a `torch.profiler.profile` records (a `record_function` range).
- lightning: a batch of a tiny model's `fit`, without looptrace, with `LooptraceProfiler`,
  with `LooptraceCallback`, and with Lightning's `SimpleProfiler` for reference.
- transformers: an optimizer step of a tiny BERT `Trainer`, with and without the callback.
- loggers: one `log_snapshot` call (a window of 6 sections) to TensorBoard, W&B offline and
  MLflow (a local file store): paid once per window, not per step.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _run(module: str, function: str, *arguments: Any) -> dict[str, float]:
    """Run `function` of the comparison module `integrations_<module>`."""
    found: dict[str, float] = getattr(importlib.import_module(f"integrations_{module}"), function)(
        *arguments
    )
    return found


def main(argv: list[str] | None = None) -> int:
    """Run the chosen comparisons and print one line per case."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="gate,ranges,lightning,transformers,loggers")
    parser.add_argument("--baseline", help="a commit whose source the gate case compares with")
    parser.add_argument("--quick", action="store_true", help="few rounds, small loops")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--rounds", type=int, help="rounds per comparison (default 5-9)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    try:
        import torch

        torch.set_num_threads(1)  # steadier on a shared machine; the same for every case
    except ImportError:
        pass
    quick = args.quick

    def rounds(full: int) -> int:
        return args.rounds or (2 if quick else full)

    # Each comparison's module imports its framework: only the chosen ones are loaded.
    runs: dict[str, Callable[[], dict[str, float]]] = {
        "gate": lambda: _run("sections", "gate", rounds(9), 500 if quick else 4000, args.baseline),
        "ranges": lambda: _run("sections", "ranges", rounds(7), 200 if quick else 2000),
        "lightning": lambda: _run("lightning", "lightning", rounds(5), 50 if quick else 300),
        "transformers": lambda: _run(
            "transformers", "transformers_steps", rounds(5), 10 if quick else 60
        ),
        "loggers": lambda: _run("loggers", "loggers", rounds(5), 5 if quick else 30),
    }
    results: dict[str, float] = {}
    for name in args.only.split(","):
        found = runs[name]()
        for case, value in found.items():
            print(f"{case:70s} {value:10.2f}", flush=True)
        results.update(found)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
