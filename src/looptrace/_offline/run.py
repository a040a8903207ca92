"""`looptrace run [options] -- python train.py`: time a PyTorch program with no edit to it.

The program (or `torchrun ... train.py`, whose every rank is instrumented) runs with a
directory first on `PYTHONPATH` whose `sitecustomize` configures looptrace and patches torch
at interpreter start (`looptrace.integrations.auto`). Its files go to a run folder; at the
end the summary of the windows (the sampled system figures under its table, as `looptrace
summary` prints them) and the commands that look further are printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from looptrace._export.settings_table import env_value
from looptrace._offline.reader import InputError
from looptrace._offline.text import escaped

PARTS = ("data", "forward", "backward", "optimizer", "checkpoint")


def add_run(commands: Any) -> None:
    """Add the `run` command to the `looptrace` parser."""
    run = commands.add_parser(
        "run",
        help="run a PyTorch program (python or torchrun) with its loop timed, no edit to it",
        description="Run a command whose Python processes are instrumented at start: DataLoader "
        "fetches, the outermost module call, backward, optimizer steps and torch.save are timed "
        "as sections, a lap per optimizer step; the files go to a run folder, and the summary "
        "is printed at the end.",
        epilog="example: looptrace run -- torchrun --nproc-per-node 4 train.py --epochs 2",
    )
    run.add_argument(
        "--out",
        type=Path,
        help="the run folder (default: ./looptrace-runs/<date-time>)",
    )
    run.add_argument(
        "--parts",
        help=f"comma-separated parts to time, of {', '.join(PARTS)} (default: all)",
    )
    run.add_argument(
        "--reset-every",
        type=int,
        help="close a window every this many steps (default: LOOPTRACE_RESET_EVERY, else 100)",
    )
    run.add_argument(
        "--system-interval",
        help="sample CPU, memory and GPUs every this many seconds, or off "
        "(default: LOOPTRACE_SYSTEM_INTERVAL, else 1)",
    )
    run.add_argument("program", nargs=argparse.REMAINDER, help="-- then the command to run")
    run.set_defaults(run=run_program)


def run_program(args: argparse.Namespace) -> int:
    """Run the program instrumented; print the summary; return the program's exit code."""
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InputError("run: give the command after --, e.g. looptrace run -- python train.py")
    folder = args.out or Path("looptrace-runs") / time.strftime("%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    environ = run_environment(
        os.environ,
        folder,
        parts=args.parts,
        reset_every=args.reset_every,
        system_interval=args.system_interval,
    )
    try:
        code = subprocess.call(command, env=environ)
    except KeyboardInterrupt:
        code = 130
    print(f"\nlooptrace run: {escaped(shlex.join(command))} exited with {code}", file=sys.stderr)
    _print_results(folder)
    return code


def run_environment(
    environ: Any,
    folder: Path,
    *,
    parts: str | None = None,
    reset_every: int | None = None,
    system_interval: str | None = None,
) -> dict[str, str]:
    """Return the program's environment: the instrumenting path first, the run folder's files."""
    here = Path(__file__).resolve().parent.parent / "_autoinstrument"
    result = dict(environ)
    path = environ.get("PYTHONPATH", "")
    result["PYTHONPATH"] = os.pathsep.join([str(here), *([path] if path else [])])
    result["LOOPTRACE_RUN_DIR"] = str(folder.resolve())
    if not env_value("LOOPTRACE_SNAPSHOT_FILE", environ):
        result["LOOPTRACE_SNAPSHOT_FILE"] = str(folder.resolve() / "snapshots.jsonl")
    if not env_value("LOOPTRACE_TRACE_FILE", environ) and _can_write_spans():
        result["LOOPTRACE_TRACE_FILE"] = str(folder.resolve() / "spans.jsonl")
    if not env_value("LOOPTRACE_RUN_ID", environ):
        result["LOOPTRACE_RUN_ID"] = folder.resolve().name
    if parts is not None:
        result["LOOPTRACE_INSTRUMENT"] = parts
    if reset_every is not None:
        result["LOOPTRACE_RESET_EVERY"] = str(reset_every)
    if system_interval is not None:
        result["LOOPTRACE_SYSTEM_INTERVAL"] = system_interval
    return result


def _can_write_spans() -> bool:
    return importlib.util.find_spec("opentelemetry.exporter.otlp.proto.common") is not None


def _print_results(folder: Path) -> None:
    """Print the summary of the run folder's windows and the commands that show more."""
    from looptrace._offline.commands import run_summary  # noqa: PLC0415 - at the end only

    snapshots = sorted(folder.glob("snapshots*.jsonl"))
    spans = sorted(folder.glob("spans*.jsonl"))
    if not snapshots:
        print(f"looptrace run: no windows written to {escaped(str(folder))}", file=sys.stderr)
        return
    names = [str(path) for path in snapshots]
    print()
    run_summary(argparse.Namespace(files=names, rank=None, since_step=None))
    inputs = " ".join(shlex.quote(str(path)) for path in [*spans, *snapshots])
    report = shlex.quote(str(folder / "report.html"))
    print(f"\nFiles: {escaped(str(folder))}/")
    print(f"Report: looptrace report {escaped(inputs)} -o {escaped(report)}")
