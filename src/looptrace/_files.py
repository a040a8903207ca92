"""Offline outputs: spans as OTLP/JSON lines and snapshots as JSON lines, one file per rank.

Both files are append-only JSON Lines. Every line is written with one `write()` on a file opened
with `O_APPEND` and no user-space buffer, so a line is complete on disk as soon as the call
returns, and a killed process leaves at most one truncated last line (which every reader skips
with a warning). Reopening a file whose last line was cut short starts on a fresh line.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from looptrace._errors import ConfigError
from looptrace._health import Incidents
from looptrace._outputs import Outputs
from looptrace._ranks import RankInfo
from looptrace._snapshot import Snapshot

TRACE_FILE_ENV = "LOOPTRACE_TRACE_FILE"
SNAPSHOT_FILE_ENV = "LOOPTRACE_SNAPSHOT_FILE"
SNAPSHOT_KIND = "looptrace.snapshot"
SNAPSHOT_VERSION = 1

PathLike = str | os.PathLike[str]


def rank_path(template: PathLike, rank: RankInfo) -> Path:
    """Return the file name of this rank for a `trace_file`/`snapshot_file` setting.

    A `{rank}` placeholder is replaced by the rank. Without one, the name is used as given in a
    job of one process, and gets `.rank<N>` inserted before its suffix otherwise
    (`spans.jsonl` -> `spans.rank3.jsonl`), so ranks sharing a directory never share a file.
    """
    text = os.fspath(template)
    if not text:
        raise ConfigError("a trace_file or snapshot_file name must not be empty")
    if "{rank}" in text:
        return Path(text.replace("{rank}", str(rank.rank)))
    path = Path(text)
    if rank.world_size == 1:
        return path
    return path.with_name(f"{path.stem}.rank{rank.rank}{path.suffix}")


class LineFile:
    """An append-only file written one complete line per `write()`; safe across threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise ConfigError(f"cannot open {path} for writing: {error.strerror}") from None
        if _ends_inside_a_line(path):
            self.write(b"\n")  # a killed writer left a partial line; keep it on its own
        if hasattr(os, "register_at_fork"):  # an exporter thread may hold the lock at fork
            ref = weakref.ref(self)

            def renew_lock() -> None:
                target = ref()
                if target is not None:
                    target._lock = threading.Lock()

            os.register_at_fork(after_in_child=renew_lock)

    def write(self, line: bytes) -> None:
        """Append `line` (which ends in a newline) with as few `write()` calls as possible."""
        with self._lock:
            if self._fd is None:
                raise ValueError(f"{self.path} is closed")
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        """Close the file; later writes raise."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _ends_inside_a_line(path: Path) -> bool:
    with path.open("rb") as handle:
        if handle.seek(0, os.SEEK_END) == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


class OtlpJsonFileExporter(SpanExporter):
    """Writes each export batch as one OTLP/JSON line (`{"resourceSpans": [...]}`).

    Attach it with a `BatchSpanProcessor`, so encoding and writing happen off the training
    thread. A failed write is counted in `Looptrace.health()` and the batch is reported lost.
    """

    def __init__(self, path: Path, incidents: Incidents | None = None) -> None:
        try:
            from looptrace._otlp_json import encode_line  # noqa: PLC0415 - needs the extra
        except ImportError:
            raise ConfigError(
                "trace_file needs the OTLP encoder: pip install 'looptrace[files]'"
            ) from None
        self._encode = encode_line
        self._file = LineFile(path)
        self._incidents = incidents or Incidents()
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append the batch as one line."""
        try:
            if spans:
                self._file.write(self._encode(spans))
        except Exception:
            self._incidents.failed(f"trace file {self.path}")
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Return True: every line is on disk when `export()` returns."""
        return True

    def shutdown(self) -> None:
        """Close the file."""
        self._file.close()


class SnapshotFileWriter:
    """An `Outputs.on_reset` sink writing each window's snapshot as one JSON line.

    A line holds `kind`, `version`, `step` (the outermost laps completed when the window
    closed, so its spans have `looptrace.step` below it), `time` (its end, epoch seconds),
    `start_ns`, `end_ns`, `rank`, `world_size`, `host` and `stats` (path -> the `SectionStats`
    fields; undefined values as null), and for `reset(across_ranks=True)` windows
    `across_ranks` (path -> the `SectionSpread` as a dict). A window in which nothing was
    measured writes no line.
    """

    def __init__(self, path: Path, rank: RankInfo) -> None:
        self._file = LineFile(path)
        self._rank = rank
        self.step: Callable[[], int | None] = lambda: None
        self._host = socket.gethostname()
        self.path = path

    def __call__(self, snapshot: Snapshot) -> None:
        """Append one line for `snapshot` (none for an empty window)."""
        if not snapshot:
            return
        record = {
            "kind": SNAPSHOT_KIND,
            "version": SNAPSHOT_VERSION,
            "step": self.step(),
            "time": snapshot.end_ns / 1e9,
            "start_ns": snapshot.start_ns,
            "end_ns": snapshot.end_ns,
            "rank": self._rank.rank,
            "world_size": self._rank.world_size,
            "host": self._host,
            "stats": {path: _finite(stats.to_dict()) for path, stats in snapshot.items()},
        }
        if snapshot.across_ranks is not None:  # reset(across_ranks=True): the job's spread
            record["across_ranks"] = {
                path: _json_safe(spread.to_dict()) for path, spread in snapshot.across_ranks.items()
            }
        self._file.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def _json_safe(value: Any) -> Any:
    """Return `value` with every NaN, at any depth, as None (JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value


def _finite(stats: dict[str, Any]) -> dict[str, Any]:
    return {
        key: None if isinstance(value, float) and math.isnan(value) else value
        for key, value in stats.items()
    }


FLUSH_TIMEOUT_S = 10.0  # a local or shared filesystem; a stalled one must not hang exit


class FileOutputs:
    """The span and snapshot files of one `configure()`, opened before anything is wired.

    Opening first means a bad file name fails `configure()` before it changes any global state.
    """

    def __init__(
        self,
        *,
        trace_file: PathLike | None,
        snapshot_file: PathLike | None,
        rank: RankInfo,
        incidents: Incidents,
        tracing: bool,
    ) -> None:
        if trace_file is None:
            trace_file = os.environ.get(TRACE_FILE_ENV) or None
        if snapshot_file is None:
            snapshot_file = os.environ.get(SNAPSHOT_FILE_ENV) or None
        self.exporter: OtlpJsonFileExporter | None = None
        self.snapshots: SnapshotFileWriter | None = None
        self.processor: BatchSpanProcessor | None = None
        if trace_file is not None and tracing:
            self.exporter = OtlpJsonFileExporter(rank_path(trace_file, rank), incidents)
        if snapshot_file is not None:
            try:
                self.snapshots = SnapshotFileWriter(rank_path(snapshot_file, rank), rank)
            except BaseException:
                self.close()
                raise

    def attach(
        self, provider: object | None, outputs: Outputs, step: Callable[[], int | None]
    ) -> None:
        """Add the span file to `provider` (an SDK one) and the snapshot file to `outputs`."""
        if self.exporter is not None:
            if not isinstance(provider, TracerProvider):
                self.close()
                raise ConfigError(
                    "trace_file needs an OpenTelemetry SDK TracerProvider, "
                    f"got {type(provider).__name__}"
                )
            self.processor = BatchSpanProcessor(self.exporter)
            provider.add_span_processor(self.processor)
            outputs.on_shutdown.append(self.processor.shutdown)
        if self.snapshots is not None:
            self.snapshots.step = step
            outputs.on_reset.append(self.snapshots)
            outputs.on_shutdown.append(self.snapshots.close)

    @property
    def active(self) -> bool:
        """Whether any file is written."""
        return self.exporter is not None or self.snapshots is not None

    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> bool:
        """Write the spans still queued for the span file (snapshots are written at once)."""
        if self.processor is None:
            return True
        return self.processor.force_flush(int(timeout_s * 1e3))

    def close(self) -> None:
        """Close both files (when `configure()` fails after opening them)."""
        if self.exporter is not None:
            self.exporter.shutdown()
        if self.snapshots is not None:
            self.snapshots.close()
