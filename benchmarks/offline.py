"""How fast the offline commands read a job's files, and how much memory they hold.

Generates a job (`offline_job.py`: every rank's span and snapshot files at the defaults, 20
sections) and measures, on one core:

1. the JSON parsers on its lines: the standard library's `json`, orjson and msgspec;
2. the readers: spans and windows read per second, with orjson and with `json` alone;
3. `summary` (spans, snapshots), `compare` and `report` of the job as commands, each in a
   process of its own: wall time and peak memory (max RSS);
4. `watch`: one refresh of every rank's growing snapshot file;
5. a job that resets every step (many windows of one rank) and one very long span line.

    python benchmarks/offline.py            # 1,024 ranks, one hour; 10^5 windows; 200 MB line
    python benchmarks/offline.py --quick    # CI: 64 ranks, 20 minutes; 10^4 windows; no long line
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from offline_job import write_job, write_many_windows, write_one_long_line

from looptrace._core.build import core_kind
from looptrace._offline import json_loads
from looptrace._offline.reader import open_inputs
from looptrace._offline.span_records import load_spans
from looptrace._offline.watch import Watcher
from looptrace._offline.window_records import load_windows

_COMMAND = """
import json, resource, sys, time
from looptrace._cli import main
start = time.perf_counter()
sys.stdout = open("/dev/null", "w")
code = main(sys.argv[1:])
sys.stdout = sys.__stdout__
seconds = time.perf_counter() - start
peak = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rss = int(peak[0].split()[1]) / 1024 if peak else own / 1024
print(json.dumps({"code": code, "s": seconds, "max_rss_mb": rss}))
"""


def _quiet(_message: str) -> None:
    """Drop the readers' warnings."""


def _time(work: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def parsers(files: list[Path]) -> dict[str, Any]:
    """Return MB per second of each JSON parser over `files`' lines (the best of 3 rounds)."""
    import msgspec
    import orjson

    lines = [line for path in files for line in path.read_bytes().splitlines()]
    size = sum(map(len, lines)) / 1e6
    decoder = msgspec.json.Decoder()
    found: dict[str, Any] = {"lines": len(lines), "mb": round(size, 1)}

    def parse_all(parse: Callable[[bytes], object]) -> None:
        for line in lines:
            parse(line)

    named = (("json", json.loads), ("orjson", orjson.loads), ("msgspec", decoder.decode))
    for name, parse in named:
        seconds = min(_time(lambda parse=parse: parse_all(parse))[0] for _ in range(3))
        found[name] = {"s": round(seconds, 3), "mb_per_s": round(size / seconds, 1)}
    return found


def readers(
    span_files: list[str], snapshot_files: list[str], spans: int, windows: int
) -> dict[str, Any]:
    """Return spans and windows read per second, with orjson and with `json` alone (best of 2)."""
    found: dict[str, Any] = {}
    fast = json_loads.orjson
    for parser in ("json", "orjson", "json", "orjson"):  # the first round grows the heap
        json_loads.orjson = fast if parser == "orjson" else None  # type: ignore[assignment]
        _, files = open_inputs(span_files, _quiet)
        seconds, read = _time(lambda files=files: load_spans(files, _quiet))
        assert len(read) == spans, (len(read), spans)  # type: ignore[arg-type]
        _, snapshot = open_inputs(snapshot_files, _quiet)
        window_s, got = _time(lambda snapshot=snapshot: load_windows("snapshot", snapshot, _quiet))
        assert len(got) == windows, (len(got), windows)  # type: ignore[arg-type]
        del read, got
        best = found.setdefault(parser, {"spans_per_s": 0, "windows_per_s": 0})
        best["spans_per_s"] = max(best["spans_per_s"], round(spans / seconds))
        best["windows_per_s"] = max(best["windows_per_s"], round(windows / window_s))
    json_loads.orjson = fast
    return found


def command(*argv: str, limit_s: float = 600.0) -> dict[str, Any]:
    """Run one looptrace command in a process of its own; return its time and peak memory."""
    try:
        result = subprocess.run(
            [sys.executable, "-c", _COMMAND, *argv],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            timeout=limit_s,
        )
    except subprocess.TimeoutExpired:
        return {"timed_out_after_s": limit_s}
    if result.returncode:
        raise RuntimeError(result.stderr[-2000:])
    figures: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return {key: round(value, 2) for key, value in figures.items()}


def watch_refresh(directory: Path, ranks: int) -> dict[str, Any]:
    """Return the time of one `watch` refresh after every rank's file grew by one window."""
    files = [directory / f"snapshots.rank{rank}.jsonl" for rank in range(ranks)]
    lines = [path.read_bytes().splitlines(keepends=True) for path in files]
    for path in files:
        path.write_bytes(b"")
    watcher = Watcher([str(directory / "snapshots.rank*.jsonl")], _quiet, time.monotonic)
    watcher.poll()
    times = []
    for index in range(min(len(lines[0]), 5)):
        for path, own in zip(files, lines, strict=True):
            with path.open("ab") as handle:
                handle.write(own[index])
        seconds, added = _time(watcher.poll)
        assert added == ranks, (added, ranks)
        times.append(seconds)
    return {"files": ranks, "refresh_s": round(max(times), 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small job, for CI")
    parser.add_argument("--json", type=Path, default=Path(__file__).with_name("offline.json"))
    args = parser.parse_args(argv)
    ranks, seconds = (64, 1200.0) if args.quick else (1024, 3600.0)
    many = 10_000 if args.quick else 100_000
    results: dict[str, Any] = {"core": core_kind(), "parser": json_loads.backend()}
    with tempfile.TemporaryDirectory(prefix="looptrace-offline-") as temporary:
        root = Path(temporary)
        job = root / "job"
        seconds_made, counts = _time(lambda: write_job(job, ranks, seconds))
        results["job"] = {**counts, "seconds": seconds, "generated_s": round(seconds_made, 1)}  # type: ignore[dict-item]
        span_files = sorted(str(p) for p in job.glob("spans.rank*.jsonl"))
        snapshot_files = sorted(str(p) for p in job.glob("snapshots.rank*.jsonl"))
        results["job"]["mb"] = round(
            sum(os.path.getsize(p) for p in span_files + snapshot_files) / 1e6, 1
        )
        print("job:", results["job"], flush=True)
        results["parsers"] = {
            "spans": parsers([Path(p) for p in span_files]),
            "snapshots": parsers([Path(p) for p in snapshot_files]),
        }
        print("parsers:", results["parsers"], flush=True)
        results["readers"] = readers(span_files, snapshot_files, counts["spans"], counts["windows"])
        print("readers:", results["readers"], flush=True)
        spans_glob, snapshots_glob = (
            str(job / "spans.rank*.jsonl"),
            str(job / "snapshots.rank*.jsonl"),
        )
        results["commands"] = {
            "summary spans": command("summary", spans_glob),
            "summary snapshots": command("summary", snapshots_glob),
            "compare": command("compare", snapshots_glob, snapshots_glob),
            "report": command("report", str(job), "-o", str(root / "report.html")),
        }
        if (root / "report.html").exists():
            html_mb = (root / "report.html").stat().st_size / 1e6
            results["commands"]["report"]["html_mb"] = round(html_mb, 2)
        print("commands:", results["commands"], flush=True)
        results["watch"] = watch_refresh(job, ranks)
        print("watch:", results["watch"], flush=True)
        reset_every_step = root / "many.jsonl"
        write_many_windows(reset_every_step, many)
        results["many_windows"] = {"windows": many, **command("summary", str(reset_every_step))}
        print("many windows:", results["many_windows"], flush=True)
        if not args.quick:
            long_line = root / "long.jsonl"
            spans = write_one_long_line(long_line, 397_000)
            results["long_line"] = {
                "spans": spans,
                "mb": round(long_line.stat().st_size / 1e6, 1),
                **command("summary", str(long_line)),
            }
            print("long line:", results["long_line"], flush=True)
    args.json.write_text(json.dumps(results, indent=1) + "\n")
    print(f"measured on the {results['core']} core; wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
