"""The `looptrace` command line: `demo`, and the offline commands of `_offline/commands.py`.

`summary`, `perfetto`, `replay`, `plot`, `report`, `compare` and `watch` read span, snapshot
and metrics files with no server.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from looptrace._base.errors import ConfigError, TimerError
from looptrace._base.version import version
from looptrace._offline.commands import add_commands
from looptrace._offline.reader import InputError
from looptrace._offline.run import add_run


class _VersionAction(argparse.Action):
    """`--version` (and which core runs) that reads the package metadata only when asked."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> None:
        from looptrace._core.build import core_kind  # noqa: PLC0415 - only when asked

        print(f"looptrace {version()} ({core_kind()} core)")
        parser.exit()


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="looptrace",
        description="Timing for ML training and inference loops, as OpenTelemetry spans.",
    )
    parser.add_argument("--version", action=_VersionAction, help="show the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="time a simulated training loop, write its files, print the statistics",
        description="Time a simulated training loop (no server, no GPU, simulated time), write "
        "its spans and snapshots into a directory, and print their summary and the commands "
        "that show them.",
        epilog="example: looptrace demo --steps 500 --seed 1 --out /tmp/looptrace-demo",
    )
    demo.add_argument("--steps", type=_positive, default=300, help="training steps (300)")
    demo.add_argument("--seed", type=int, default=0, help="random seed of the durations (0)")
    demo.add_argument(
        "--out", type=Path, default=Path("looptrace-demo"), help="directory (./looptrace-demo)"
    )
    add_commands(commands)
    add_run(commands)
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the command line with `argv` (default: `sys.argv[1:]`); return the exit code."""
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            from looptrace._demo import demo_report, run_demo  # noqa: PLC0415 - loads the SDK

            result = run_demo(steps=args.steps, seed=args.seed, directory=args.out)
            print(demo_report(result))
            return 0
        code: int = args.run(args)
    except BrokenPipeError:  # the reader of our output went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (InputError, ConfigError, TimerError, OSError) as error:
        print(f"looptrace {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return 1
    return code


def _one_line(error: BaseException) -> str:
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror}"
    return str(error).splitlines()[0] if str(error) else type(error).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
