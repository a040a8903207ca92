"""The offline commands: `summary`, `perfetto`, `replay`, `plot`, `report`, `compare`, `watch`.

Their parsers and runners; the work is done by the modules of `_offline/`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from looptrace._export.extras import needs_files_extra
from looptrace._export.settings_table import env_value, option_help, setting, signal_variable
from looptrace._offline.output import check_output, is_looptrace_png, is_looptrace_trace
from looptrace._offline.reader import SNAPSHOTS, SPANS, InputError, JsonLinesFile, Warn, open_inputs
from looptrace._offline.text import escaped
from looptrace._offline.window_records import load_windows

Subparsers = Any  # argparse's _SubParsersAction is private
_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
_TIMEOUT = "OTEL_EXPORTER_OTLP_TIMEOUT"


def add_commands(commands: Subparsers) -> None:
    """Add the offline commands to the `looptrace` parser."""
    summary = _command(
        commands,
        "summary",
        "statistics per section of span, snapshot or metrics files, as a tree table",
        "looptrace summary runs/spans.rank*.jsonl --since-step 100",
        run_summary,
    )
    _add_filters(summary)

    perfetto = _command(
        commands,
        "perfetto",
        "convert span files to a Chrome/Perfetto trace (pid = rank, tid = thread)",
        "looptrace perfetto runs/spans.rank*.jsonl -o trace.json   # open it in ui.perfetto.dev",
        run_perfetto,
    )
    perfetto.add_argument("-o", "--output", required=True, help="the trace JSON file to write")
    _add_force(perfetto)
    _add_filters(perfetto)

    replay = _command(
        commands,
        "replay",
        "send recorded spans to an OTLP collector, ids and timestamps unchanged",
        "looptrace replay runs/spans.jsonl --endpoint http://collector:4318 "
        "--header x-mlflow-experiment-id=3",
        run_replay,
    )
    _add_setting(replay, _ENDPOINT)
    _add_setting(replay, _PROTOCOL, choices=setting(_PROTOCOL).choices)
    _add_setting(replay, _HEADERS, action="append", default=[], metavar="KEY=VALUE")
    _add_setting(replay, _TIMEOUT, type=float)
    replay.add_argument(
        "--max-request-bytes",
        type=_request_limit,
        default=4 * 1024 * 1024,
        metavar="BYTES",
        help="split a recorded batch into requests of at most this many bytes (4194304, "
        "4 MiB: the default limit of gRPC servers and of the Collector's OTLP receiver)",
    )

    plot = _command(
        commands,
        "plot",
        "draw a PNG of per-step, per-section and per-rank timings",
        "looptrace plot runs/snapshots.jsonl -o timings.png --size 1600x1000",
        run_plot,
    )
    plot.add_argument("-o", "--output", required=True, help="the PNG file to write")
    _add_force(plot)
    plot.add_argument("--timer", help="the timer split per step (default: the largest outermost)")
    plot.add_argument(
        "--size", type=_size, default=(1200, 900), help="WIDTHxHEIGHT in pixels (1200x900)"
    )
    _add_filters(plot)

    report = _command(
        commands,
        "report",
        "write one self-contained HTML page of span, snapshot and metrics files (any ranks)",
        "looptrace report runs/ -o report.html   # files, globs or directories",
        run_report,
    )
    report.add_argument("-o", "--output", required=True, help="the HTML file to write")

    compare = commands.add_parser(
        "compare",
        help="compare two runs' snapshot files per section, with bootstrap intervals",
        description="Compare the p50 and the step share of every section between two runs' "
        "snapshot files, with 95% bootstrap intervals over ranks (one rank: blocks of its "
        "windows), largest impact first.",
        epilog="example: looptrace compare 'base/snapshots*.jsonl' new/ --max-regression 5",
    )
    compare.add_argument(
        "baseline", help="the baseline: a snapshot file, a directory or a quoted glob"
    )
    compare.add_argument("candidate", help="the candidate, the same way")
    compare.add_argument(
        "--max-regression",
        type=float,
        metavar="PCT",
        help="exit 1 when a section's p50 grew by more than PCT %% and the interval excludes 0",
    )
    compare.add_argument(
        "--min-windows",
        type=int,
        default=3,
        metavar="N",
        help="a section needs N windows a side to fail --max-regression (default 3)",
    )
    compare.add_argument(
        "--min-impact",
        type=float,
        default=1.0,
        metavar="PCT",
        help="a section's time per lap must change by PCT %% of the lap to fail "
        "--max-regression (default 1)",
    )
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.set_defaults(run=run_compare)

    watch = _command(
        commands,
        "watch",
        "a live view of snapshot files as ranks append to them (q or Ctrl-C quits)",
        "looptrace watch 'runs/snapshots.rank*.jsonl'   # files, quoted globs or directories",
        run_watch,
    )
    watch.add_argument(
        "--interval", type=float, default=1.0, help="seconds between looks at the files (1)"
    )


def _add_force(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite an existing output that looptrace did not write (never an input)",
    )


def _add_setting(parser: argparse.ArgumentParser, name: str, **kwargs: Any) -> None:
    """Add the option of a setting of the table, with the table's help."""
    option = setting(name).option
    assert option is not None, name
    parser.add_argument(option, help=option_help(name), **kwargs)


def _command(
    commands: Subparsers, name: str, summary: str, example: str, run: Callable[..., int]
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=f"example: {example}",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="JSON-lines files")
    parser.set_defaults(run=run)
    return parser


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rank",
        type=_ranks,
        action="extend",
        help="only these ranks (comma-separated or repeated)",
    )
    parser.add_argument(
        "--since-step",
        type=_non_negative,
        help="only spans of this step on, or windows closed at this step or later",
    )


def _ranks(text: str) -> list[int]:
    try:
        ranks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ranks: {text!r}") from None
    if not ranks or min(ranks) < 0:
        raise argparse.ArgumentTypeError(f"ranks are integers >= 0, got {text!r}")
    return ranks


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _request_limit(text: str) -> int:
    value = _non_negative(text)
    if value < 64 * 1024:
        raise argparse.ArgumentTypeError(f"must be at least 65536 (64 KiB), got {value}")
    return value


def _size(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not match or not (200 <= int(match[1]) <= 10000 and 200 <= int(match[2]) <= 10000):
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, 200 to 10000 each: {text!r}")
    return int(match[1]), int(match[2])


def warner(command: str) -> Warn:
    """Return a function printing one warning line of `command` on stderr."""

    def warn(message: str) -> None:
        print(f"looptrace {command}: warning: {message}", file=sys.stderr)

    return warn


def _needs(extra: str, modules: str) -> InputError:
    return InputError(f"this command needs {modules}: pip install 'looptrace[{extra}]'")


def _summary_of(
    args: argparse.Namespace,
    warn: Warn,
    spans_only: str = "",
    opened: tuple[str, list[JsonLinesFile]] | None = None,
) -> tuple[Any, Any, str]:
    """Return `(summary, records, kind)` of the input files after the rank and step filters.

    With `spans_only` (a command name), files of another kind are an error; `opened`: the
    files' kind and files, already opened.
    """
    from looptrace._offline.summary import select, summarize_spans, summarize_windows  # noqa: PLC0415

    kind, files = opened or open_inputs(args.files, warn)
    if spans_only and kind != SPANS:
        raise InputError(f"{spans_only} needs span files; {files[0].name} is a {kind} file")
    if kind == SPANS:
        with needs_files_extra(InputError):
            from looptrace._offline.span_records import load_spans  # noqa: PLC0415
        spans = load_spans(files, warn)
        if not spans:
            raise InputError(f"no spans in {', '.join(args.files)}")
        chosen = select(spans, args.rank, args.since_step)
        return _with_losses(summarize_spans(chosen), files), chosen, kind
    windows = load_windows(kind, files, warn)
    if not windows:
        raise InputError(f"no readable records in {', '.join(args.files)}")
    kept = select(windows, args.rank, args.since_step)
    return _with_losses(summarize_windows(kept), files), kept, kind


def _streamed_summary(args: argparse.Namespace, warn: Warn) -> tuple[Any, str | None, str]:
    """Return `(summary, findings' lines or None, kind)`: windows folded as they are read."""
    from looptrace._offline.summary_fold import summarize_files  # noqa: PLC0415

    kind, files = open_inputs(args.files, warn)
    if kind == SPANS:
        summary, _, _ = _summary_of(args, warn, opened=(kind, files))
        return summary, None, kind
    found = summarize_files(kind, files, warn, args.rank, args.since_step)
    if found is None:
        raise InputError(f"no readable records in {', '.join(args.files)}")
    summary, findings = found
    return _with_losses(summary, files), findings if kind == SNAPSHOTS else None, kind


def _with_losses(summary: Any, files: list[JsonLinesFile]) -> Any:
    """Add what the writers recorded as lost (a full disk, a stalled writer) to the summary."""
    lost: dict[str, int] = {}
    for file in files:
        for what, count in file.lost.items():
            lost[what] = lost.get(what, 0) + count
    if not lost:
        return summary
    text = "".join(f", {count} {what} lost" for what, count in sorted(lost.items()))
    return dataclasses.replace(summary, description=summary.description + text)


def run_summary(args: argparse.Namespace) -> int:
    """Print the tree table of the input files."""
    from looptrace._offline.summary import render_summary  # noqa: PLC0415

    hang = hang_verdict(args.files)
    if hang is not None:
        print(hang, end="\n\n")
    try:
        summary, findings, kind = _streamed_summary(args, warner("summary"))
    except InputError:
        if hang is not None:  # stuck before any window closed: the verdict is the summary
            return 0
        raise
    if findings is not None:
        print(findings, end="\n\n")
    print(f"{kind} files: {render_summary(summary)}")
    if kind == SPANS:  # the traced steps only: say so, and where every step is
        from looptrace._offline.inputs import expand_inputs  # noqa: PLC0415
        from looptrace._offline.sampled import SAMPLED, snapshots_beside  # noqa: PLC0415

        beside = snapshots_beside(expand_inputs(args.files, lambda _message: None))
        more = "" if beside is None else f"; every step: looptrace summary {escaped(beside)}"
        print(f"\n{SAMPLED}{more}")
    return 0


def hang_verdict(names: list[str]) -> str | None:
    """Return the verdict of the hang lines of the files named (None: no rank is hung)."""
    from looptrace._offline.hangs import read_hangs, verdict  # noqa: PLC0415
    from looptrace._offline.inputs import expand_inputs  # noqa: PLC0415

    return verdict(read_hangs(expand_inputs(names, lambda _message: None)))


def run_perfetto(args: argparse.Namespace) -> int:
    """Write the Chrome/Perfetto trace of span files."""
    with needs_files_extra(InputError):
        from looptrace._offline.perfetto import chrome_trace  # noqa: PLC0415
    output = Path(args.output)
    check_output(output, args.files, force=args.force, ours=is_looptrace_trace)
    summary, spans, _ = _summary_of(args, warner("perfetto"), spans_only="perfetto")
    trace = chrome_trace(spans)
    with output.open("w", encoding="utf-8") as handle:
        json.dump(trace, handle, separators=(",", ":"))
    ranks = sorted(summary.per_rank)
    print(
        f"wrote {output}: {len(spans)} spans of {len(ranks)} rank"
        f"{'' if len(ranks) == 1 else 's'} ({', '.join(map(str, ranks))}); "
        "open it at https://ui.perfetto.dev (the file stays on your machine) or chrome://tracing"
    )
    return 0


def run_replay(args: argparse.Namespace) -> int:
    """Send the spans of the input files to a collector; print what was delivered."""
    warn = warner("replay")
    if not (
        args.endpoint
        or env_value(signal_variable(_ENDPOINT, "traces"), os.environ).strip()
        or env_value(_ENDPOINT, os.environ).strip()
    ):
        raise InputError(f"no --endpoint given and {_ENDPOINT} is not set")
    with needs_files_extra(InputError):
        from looptrace._offline import replay as _replay  # noqa: PLC0415
    settings = _replay.replay_settings(args.endpoint, args.protocol, args.header, args.timeout)
    kind, files = open_inputs(args.files, warn)
    if kind != SPANS:
        raise InputError(f"replay needs span files; {files[0].name} is a {kind} file")
    try:
        with _replay.graceful_interrupt() as stop:
            sender = _replay.make_sender(settings, _replay.Retry(stop=stop))
            try:
                result = _replay.replay(files, sender, warn, stop, args.max_request_bytes)
            finally:
                sender.close()
    except ImportError:
        raise _needs("otlp", "grpcio for OTLP/gRPC") from None
    where = f"to {args.endpoint or settings.endpoint} ({settings.protocol})"
    sent = f"{result.spans} spans in {result.requests} requests"
    rejected = f"; the collector rejected {result.rejected} of them" if result.rejected else ""
    if result.error is not None:
        after = f" after {result.last}" if result.last else ""
        print(f"looptrace replay: error: {result.error}", file=sys.stderr)
        print(f"sent {sent} {where}{rejected}; stopped{after}")
        return 1
    if result.interrupted:
        after = f" (through {result.last})" if result.last else ""
        print(f"interrupted: sent {sent}{after} {where}{rejected}; the rest was not sent")
        return 130
    if result.refusals:
        lost = f"{result.refused_spans} span{'s' * (result.refused_spans != 1)}"
        print(
            f"replayed {sent} {where}{rejected}; {lost} not delivered (each refusal is named above)"
        )
        return 1
    print(f"replayed {sent} {where}{rejected}")
    return 0


def run_plot(args: argparse.Namespace) -> int:
    """Draw the timings of the input files into a PNG."""
    try:
        from looptrace._offline.plot import draw  # noqa: PLC0415
        from looptrace._offline.plot_data import from_spans, from_windows  # noqa: PLC0415
    except ImportError:
        raise _needs("plot", "matplotlib") from None
    output = Path(args.output)
    check_output(output, args.files, force=args.force, ours=is_looptrace_png)
    summary, records, kind = _summary_of(args, warner("plot"))
    data = (
        from_spans(records, summary, args.timer)
        if kind == SPANS
        else from_windows(records, summary, args.timer)
    )
    try:
        draw(data, output, *args.size)
    except ImportError:
        raise _needs("plot", "matplotlib") from None
    width, height = args.size
    print(f"wrote {output} ({width}x{height} px): {data.source}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    """Write the HTML report of the input files."""
    from looptrace._base.version import version  # noqa: PLC0415
    from looptrace._core.build import core_kind  # noqa: PLC0415

    try:
        from looptrace._offline.report import write_report  # noqa: PLC0415
    except ImportError:
        raise _needs("files", "jinja2") from None

    output = Path(args.output)
    made_by = f"looptrace {version()} ({core_kind()} core)"
    data = write_report(args.files, output, warner("report"), made_by)
    ranks = data.ranks
    print(
        f"wrote {output} ({output.stat().st_size / 1e6:.2f} MB): {data.description}; "
        f"{len(ranks)} rank{'' if len(ranks) == 1 else 's'}, "
        f"{len(data.waterfalls)} waterfalls"
    )
    return 0


def run_compare(args: argparse.Namespace) -> int:
    """Print the per-section change from the baseline to the candidate; 1 on a regression."""
    from looptrace._offline import compare  # noqa: PLC0415

    warn = warner("compare")
    base = compare.load_side(args.baseline, warn)
    cand = compare.load_side(args.candidate, warn)
    gate = compare.Gate(args.max_regression, args.min_windows, args.min_impact)
    timer, changes = compare.compare(base, cand, gate)
    if args.json:
        print(json.dumps(compare.as_json(timer, changes, args.max_regression), indent=1))
    else:
        print(compare.render(timer, changes, args.max_regression))
    return 1 if any(change.flagged for change in changes) else 0


def run_watch(args: argparse.Namespace) -> int:
    """Follow snapshot files in a live terminal view until `q` or Ctrl-C."""
    try:
        from looptrace._offline.watch import watch  # noqa: PLC0415
    except ImportError:
        raise _needs("files", "rich") from None
    return watch(args.files, warner("watch"), interval=max(0.05, args.interval), keys=sys.stdin)
