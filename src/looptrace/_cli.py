"""The `looptrace` command line: `looptrace demo` (more commands build on the same parser)."""

from __future__ import annotations

import argparse
import sys

from looptrace import __version__
from looptrace._demo import demo_report, run_demo


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="looptrace",
        description="Timing for ML training and inference loops, as OpenTelemetry spans.",
    )
    parser.add_argument("--version", action="version", version=f"looptrace {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="time a simulated training loop and print the statistics",
        description="Time a simulated training loop (no server, no GPU) and print a tree "
        "table of the last window's statistics.",
        epilog="example: looptrace demo --steps 500 --seed 1",
    )
    demo.add_argument("--steps", type=_positive, default=300, help="training steps (300)")
    demo.add_argument("--seed", type=int, default=0, help="random seed of the durations (0)")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the command line with `argv` (default: `sys.argv[1:]`); return the exit code."""
    args = _build_parser().parse_args(argv)
    if args.command == "demo":
        print(demo_report(run_demo(steps=args.steps, seed=args.seed)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
