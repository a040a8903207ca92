"""`looptrace demo`: a simulated training loop timed by looptrace, written to files.

The loop runs on a fake clock (simulated time, no sleeping), writes its spans and snapshots into
a directory, and prints the summary of those files and the commands that show them.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from looptrace._base.errors import ConfigError
from looptrace._configure import configure, looptrace_resource
from looptrace._core.clock import ManualClock
from looptrace._distributed.ranks import RankInfo
from looptrace._export.extras import FILES_EXTRA_MISSING
from looptrace._looptrace import Looptrace
from looptrace._offline.reader import open_inputs
from looptrace._offline.summary import render_summary, summarize_spans, summarize_windows
from looptrace._offline.table import render_table
from looptrace._offline.window_records import load_windows
from looptrace._stats.snapshot import Snapshot

SPAN_FILE = "spans.jsonl"
SNAPSHOT_FILE = "snapshots.jsonl"


@dataclass(frozen=True)
class DemoResult:
    """What a demo run produced: the last window's snapshot, the steps and the files written.

    `span_file` is None when the OTLP encoder (the `files` extra) is not installed.
    """

    snapshot: Snapshot
    steps: int
    seconds: float
    span_file: Path | None = None
    snapshot_file: Path | None = None


class _Work:
    """Draws section durations from skewed (log-normal) distributions and spends them."""

    def __init__(self, clock: ManualClock, rng: random.Random) -> None:
        self._clock = clock
        self._rng = rng

    def spend(self, median_s: float, spread: float = 0.25, stall_p: float = 0.0) -> None:
        seconds = self._rng.lognormvariate(0.0, spread) * median_s
        if stall_p and self._rng.random() < stall_p:
            seconds *= self._rng.uniform(5, 20)  # a slow batch, a straggling read
        self._clock.advance(seconds)


def run_demo(
    steps: int = 300, seed: int = 0, reset_every: int = 100, directory: Path | None = None
) -> DemoResult:
    """Time `steps` simulated training steps on simulated time; return the last window.

    The loop has data loading, a forward pass with an encoder and a decoder, backward and an
    optimizer step, an evaluation every 50 steps and a checkpoint every 100. With `directory`,
    spans and snapshots are written there, into files of fresh names (see `_fresh_files`).
    """
    clock = ManualClock()
    start = clock.monotonic_ns()
    work = _Work(clock, random.Random(seed))
    provider = TracerProvider(resource=looptrace_resource("looptrace-demo", RankInfo()))
    lt, span_file, snapshot_file = _configure(clock, provider, directory)
    train = lt.timer("training")
    forward = train.timer("forward")
    snapshot = lt.reset()
    for step in range(1, steps + 1):
        train.record("data")
        work.spend(0.012, spread=0.4, stall_p=0.02)
        train.record("forward")
        forward.record("encoder")
        work.spend(0.018)
        forward.record("decoder")
        work.spend(0.011)
        train.record("backward")
        work.spend(0.055, spread=0.15)
        with train.section("optimizer"):
            work.spend(0.006, spread=0.1)
        if step % 50 == 0:
            with train.section("eval"):
                work.spend(1.5, spread=0.05)
        if step % 100 == 0:
            with train.section("checkpoint"):
                work.spend(4.0, spread=0.3)
        if step < steps:
            train.record()  # the step ends, the next one starts
        else:
            train.stop()
        if step % reset_every == 0 or step == steps:
            snapshot = lt.reset()
    lt.shutdown()
    provider.shutdown()
    return DemoResult(
        snapshot=snapshot,
        steps=steps,
        seconds=(clock.monotonic_ns() - start) / 1e9,
        span_file=span_file,
        snapshot_file=snapshot_file,
    )


def _configure(
    clock: ManualClock, provider: TracerProvider, directory: Path | None
) -> tuple[Looptrace, Path | None, Path | None]:
    """Return the demo's looptrace (every step traced) and the span and snapshot files."""

    def make(trace_file: Path | None = None, snapshot_file: Path | None = None) -> Looptrace:
        return configure(
            "looptrace-demo",
            clock=clock,
            rank=RankInfo(),
            tracer_provider=provider,
            trace_every=1,
            trace_file=trace_file,
            snapshot_file=snapshot_file,
        )

    if directory is None:
        return make(), None, None
    spans, snapshots = _fresh_files(directory)
    try:
        return make(trace_file=spans, snapshot_file=snapshots), spans, snapshots
    except ConfigError:  # no OTLP encoder (the `files` extra): snapshots only
        spans.unlink(missing_ok=True)  # created empty by _fresh_files, for this run
        return make(snapshot_file=snapshots), None, snapshots


def _fresh_files(directory: Path) -> tuple[Path, Path]:
    """Create and return an empty span and snapshot file of names no file in `directory` has.

    `spans.jsonl` and `snapshots.jsonl`, else `spans-2.jsonl` and `snapshots-2.jsonl`, and so
    on: the demo never writes into a file it did not create (a real run's, an earlier demo's).
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"--out: cannot create {directory}: {error.strerror}") from None
    for number in range(1, 10_000):
        tag = "" if number == 1 else f"-{number}"
        spans = directory / SPAN_FILE.replace(".jsonl", f"{tag}.jsonl")
        snapshots = directory / SNAPSHOT_FILE.replace(".jsonl", f"{tag}.jsonl")
        if spans.exists() or snapshots.exists():
            continue
        try:
            _create(spans)
        except FileExistsError:
            continue
        try:
            _create(snapshots)
        except FileExistsError:
            spans.unlink()
            continue
        return spans, snapshots
    raise ConfigError(f"--out: no free file names left in {directory}")


def _create(path: Path) -> None:
    """Create `path` empty, failing if it exists."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        raise
    except OSError as error:
        raise ConfigError(f"--out: cannot create {path}: {error.strerror}") from None


def demo_report(result: DemoResult) -> str:
    """Return the printed report: a title, the summary of the files, and how to look at them."""
    title = (
        f"looptrace demo: {result.steps} simulated training steps, "
        f"{result.seconds:.1f} s of simulated time"
    )
    snapshots, spans = result.snapshot_file, result.span_file
    if snapshots is None:
        return f"{title}; the last window:\n\n{render_table(result.snapshot)}"
    directory = snapshots.parent
    lines = [f"{title}, written to {directory}/", "", _summary(result), ""]
    if spans is None:
        lines += [
            f"Snapshots: {snapshots} (one line per reset())",
            f"Spans:     not written; {FILES_EXTRA_MISSING}",
            "Look at them:",
            f"  looptrace summary {snapshots}",
            f"  looptrace plot {snapshots} -o {directory / 'timings.png'}",
            f"  looptrace report {snapshots} -o {directory / 'report.html'}"
            "   # one HTML page, opens offline",
        ]
    else:
        lines += [
            f"Spans:     {spans} (OTLP/JSON, one export batch per line)",
            f"Snapshots: {snapshots} (one line per reset())",
            "Look at them:",
            f"  looptrace summary {snapshots}",
            f"  looptrace plot {spans} -o {directory / 'timings.png'}",
            f"  looptrace perfetto {spans} -o {directory / 'trace.json'}"
            "   # then open it in https://ui.perfetto.dev",
            f"  looptrace report {spans} {snapshots} -o {directory / 'report.html'}"
            "   # one HTML page, opens offline",
            f"  looptrace replay {spans} --endpoint http://localhost:4318"
            "   # into a collector, Jaeger or Tempo",
        ]
    return "\n".join(lines)


def _summary(result: DemoResult) -> str:
    """Return the summary of the span file (exact), else of the snapshot file."""
    if result.span_file is not None:
        from looptrace._offline.span_records import load_spans  # noqa: PLC0415 - needs the extra

        _, files = open_inputs([str(result.span_file)], _ignore)
        return "span file: " + render_summary(summarize_spans(load_spans(files, _ignore)))
    assert result.snapshot_file is not None
    kind, files = open_inputs([str(result.snapshot_file)], _ignore)
    windows = load_windows(kind, files, _ignore)
    return "snapshot file: " + render_summary(summarize_windows(windows))


def _ignore(_message: str) -> None:
    """Drop reader warnings: the demo's own files are complete."""
