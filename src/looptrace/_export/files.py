"""Offline outputs: spans as OTLP/JSON lines and snapshots as JSON lines, one file per rank.

Both files are append-only JSON Lines. Every line is written with one `write()` on a file opened
with `O_APPEND` and no user-space buffer, so a line is complete on disk as soon as the call
returns, and a killed process leaves at most one truncated last line (which every reader skips
with a warning). Reopening a file whose last line was cut short starts on a fresh line.
"""

from __future__ import annotations

import contextlib
import errno
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
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from looptrace._distributed.ranks import RankInfo
from looptrace._export.outputs import Outputs
from looptrace._export.records import LOSS_KIND, SNAPSHOT_KIND, SNAPSHOT_VERSION
from looptrace._export.span_file import SpanFileProcessor
from looptrace._stats.errors import ConfigError
from looptrace._stats.health import Incidents
from looptrace._stats.snapshot import Snapshot

PathLike = str | os.PathLike[str]


def rank_path(template: object, rank: RankInfo, setting: str = "trace_file") -> Path:
    """Return the file name of this rank for a `trace_file`/`snapshot_file` setting.

    A `{rank}` placeholder is replaced by the rank. Without one, the name is used as given in a
    job of one process, and gets `.rank<N>` inserted before its suffix otherwise
    (`spans.jsonl` -> `spans.rank3.jsonl`), so ranks sharing a directory never share a file.

    Raises:
        ConfigError: `template` is not a non-empty path without NUL characters.

    """
    if not isinstance(template, str | os.PathLike):
        raise ConfigError(f"{setting}: expected a file path, got {type(template).__name__}")
    text = os.fspath(template)
    if not isinstance(text, str):
        raise ConfigError(f"{setting}: expected a str path, got {type(text).__name__}")
    if not text:
        raise ConfigError(f"{setting}: a trace_file or snapshot_file name must not be empty")
    if "\0" in text:
        raise ConfigError(f"{setting}: the file name {text!r} holds a NUL character")
    if "{rank}" in text:
        return Path(text.replace("{rank}", str(rank.rank)))
    path = Path(text)
    if rank.world_size == 1:
        return path
    return path.with_name(f"{path.stem}.rank{rank.rank}{path.suffix}")


class LineFile:
    """An append-only file written one complete line per `write()`; safe across threads.

    A write that fails part-way (a full disk, a file size limit) is cut back to the last
    complete line, so the file never ends inside a line and the next write starts cleanly.
    """

    def __init__(self, path: Path, setting: str = "trace_file") -> None:
        self.path = path
        self._lock = threading.Lock()
        self.created_dirs = [p for p in reversed(path.parents) if not p.exists()]
        self.created = not os.path.lexists(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
            self._fd: int | None = os.open(path, flags, 0o644)
        except OSError as error:
            self._remove_created(files=False)
            raise ConfigError(
                f"{setting}: cannot open {path} for writing: {error.strerror}"
            ) from None
        try:
            if _ends_inside_a_line(path):
                self.write(b"\n")  # a killed writer left a partial line; keep it on its own
        except OSError as error:
            self.remove()
            raise ConfigError(f"{setting}: cannot write to {path}: {error.strerror}") from None
        if hasattr(os, "register_at_fork"):  # an exporter thread may hold the lock at fork
            ref = weakref.ref(self)

            def renew_lock() -> None:
                target = ref()
                if target is not None:
                    target._lock = threading.Lock()

            os.register_at_fork(after_in_child=renew_lock)

    def write(self, line: bytes) -> None:
        """Append `line` (complete lines) whole, or raise `OSError` leaving the file as it was."""
        with self._lock:
            if self._fd is None:
                raise OSError(errno.EBADF, "closed", str(self.path))
            size = os.fstat(self._fd).st_size
            view = memoryview(line)
            try:
                while view:
                    written = os.write(self._fd, view)
                    if written == 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
                    view = view[written:]
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, size)
                raise

    def close(self) -> None:
        """Close the file; later writes raise."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def remove(self) -> None:
        """Close the file and delete it, and the directories, if this object created them."""
        self.close()
        self._remove_created(files=True)

    def _remove_created(self, *, files: bool) -> None:
        if files and self.created:
            with contextlib.suppress(OSError):
                self.path.unlink()
        for directory in reversed(self.created_dirs):
            with contextlib.suppress(OSError):
                directory.rmdir()


def _ends_inside_a_line(path: Path) -> bool:
    with path.open("rb") as handle:
        if handle.seek(0, os.SEEK_END) == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def loss_line(what: str, count: int) -> bytes:
    """Return the line that records `count` spans or windows lost before it (none if 0)."""
    if count <= 0:
        return b""
    return json.dumps({"kind": LOSS_KIND, what: count}, separators=(",", ":")).encode() + b"\n"


class OtlpJsonFileExporter(SpanExporter):
    """Writes each export batch as one OTLP/JSON line (`{"resourceSpans": [...]}`).

    `SpanFileProcessor` calls it off the training thread. A batch that cannot be written is
    counted in `Looptrace.health()` (`dropped_spans`, and one `internal_errors` per failure,
    the first logged) and recorded by a loss line (`{"kind": "looptrace.lost", "spans": N}`)
    written before the next batch that fits, so `looptrace summary` reports it.
    """

    def __init__(self, path: Path, incidents: Incidents | None = None) -> None:
        try:
            from looptrace._export.otlp_json import encode_line  # noqa: PLC0415 - needs the extra
        except ImportError:
            raise ConfigError(
                "trace_file needs the OTLP encoder: pip install 'looptrace[files]'"
            ) from None
        self._encode = encode_line
        self._file = LineFile(path, "trace_file")
        self._incidents = incidents or Incidents()
        self._unrecorded = 0
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append the batch as one line (after the record of earlier losses)."""
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = self._encode(spans)
        except Exception:
            self._incidents.failed(f"trace file {self.path}")
            self._lost(len(spans))
            return SpanExportResult.FAILURE
        try:
            self._file.write(loss_line("spans", self._unrecorded) + line)
        except OSError as error:
            self._incidents.write_failed(
                f"trace file {self.path}",
                f"cannot write spans to {self.path}: {error.strerror}; lost spans are counted "
                "in lt.health().dropped_spans and recorded in the file when it can be "
                "written again",
            )
            self._lost(len(spans))
            return SpanExportResult.FAILURE
        self._unrecorded = 0
        return SpanExportResult.SUCCESS

    def lost(self, spans: int) -> None:
        """Count spans lost before they reached this exporter (a stalled writer)."""
        self._lost(spans)

    def _lost(self, spans: int) -> None:
        self._unrecorded += spans
        self._incidents.dropped(spans)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Return True: every line is on disk when `export()` returns."""
        return True

    def shutdown(self) -> None:
        """Record losses not yet in the file, if it can be written, and close it."""
        with contextlib.suppress(OSError):
            self._file.write(loss_line("spans", self._unrecorded))
            self._unrecorded = 0
        self._file.close()

    def remove(self) -> None:
        """Close the file and delete it if it was created for this exporter."""
        self._file.remove()


class SnapshotFileWriter:
    """An `Outputs.on_reset` sink writing each window's snapshot as one JSON line.

    A line holds `kind`, `version`, `step` (the outermost laps completed when the window
    closed, so its spans have `looptrace.step` below it), `steps` (`[first, last]`: the steps
    it holds time of, the first and the last possibly in part; absent when no lap ran in it),
    `time` (its end, epoch seconds),
    `start_ns`, `end_ns`, `rank`, `world_size`, `host` and `stats` (path -> the `SectionStats`
    fields; undefined values as null), for `reset(across_ranks=True)` windows
    `across_ranks` (path -> the `SectionSpread` as a dict), and for a `timer.reset()` window
    `subtree` (that timer's path; its `step` counts that subtree's laps). A window in which
    nothing was measured writes no line.
    """

    def __init__(self, path: Path, rank: RankInfo, incidents: Incidents | None = None) -> None:
        self._file = LineFile(path, "snapshot_file")
        self._incidents = incidents or Incidents()
        self._unrecorded = 0
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
            "step": self.step() if snapshot.subtree == "root" else snapshot.step,
            "time": snapshot.end_ns / 1e9,
            "start_ns": snapshot.start_ns,
            "end_ns": snapshot.end_ns,
            "rank": self._rank.rank,
            "world_size": self._rank.world_size,
            "host": self._host,
            "stats": {path: _finite(stats.to_dict()) for path, stats in snapshot.items()},
        }
        if snapshot.steps:  # the first and last step it holds time of
            record["steps"] = [snapshot.steps.start, snapshot.steps.stop - 1]
        if snapshot.subtree != "root":  # timer.reset(): the window of that timer's subtree
            record["subtree"] = snapshot.subtree
        if snapshot.across_ranks is not None:  # reset(across_ranks=True): the job's spread
            record["across_ranks"] = {
                path: _json_safe(spread.to_dict()) for path, spread in snapshot.across_ranks.items()
            }
        line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        try:
            self._file.write(loss_line("windows", self._unrecorded) + line)
        except OSError as error:
            self._unrecorded += 1
            self._incidents.write_failed(
                f"snapshot file {self.path}",
                f"cannot write a window to {self.path}: {error.strerror}; lost windows are "
                "counted in lt.health().internal_errors and recorded in the file when it can "
                "be written again",
            )
            return
        self._unrecorded = 0

    def close(self) -> None:
        """Record losses not yet in the file, if it can be written, and close it."""
        with contextlib.suppress(OSError):
            self._file.write(loss_line("windows", self._unrecorded))
            self._unrecorded = 0
        self._file.close()

    def remove(self) -> None:
        """Close the file and delete it if it was created for this writer."""
        self._file.remove()


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

    Opening first means a bad file name fails `configure()` before it changes any global state;
    `discard()` undoes the opening when a later step of `configure()` fails.
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
        self.exporter: OtlpJsonFileExporter | None = None
        self.snapshots: SnapshotFileWriter | None = None
        self.processor: SpanFileProcessor | None = None
        try:
            if trace_file is not None and tracing:
                path = rank_path(trace_file, rank, "trace_file")
                self.exporter = OtlpJsonFileExporter(path, incidents)
            if snapshot_file is not None:
                path = rank_path(snapshot_file, rank, "snapshot_file")
                self.snapshots = SnapshotFileWriter(path, rank, incidents)
        except BaseException:
            self.discard()
            raise

    def check_provider(self, provider: object | None) -> None:
        """Raise `ConfigError` if the span file cannot be added to `provider` (None: an SDK one)."""
        if self.exporter is not None and not isinstance(provider, TracerProvider | None):
            raise ConfigError(
                "trace_file needs an OpenTelemetry SDK TracerProvider, "
                f"got {type(provider).__name__}"
            )

    def attach(
        self, provider: object | None, outputs: Outputs, step: Callable[[], int | None]
    ) -> None:
        """Add the span file to `provider` (an SDK one) and the snapshot file to `outputs`."""
        if self.exporter is not None:
            if not isinstance(provider, TracerProvider):
                self.discard()
                raise ConfigError(
                    "trace_file needs an OpenTelemetry SDK TracerProvider, "
                    f"got {type(provider).__name__}"
                )
            self.processor = SpanFileProcessor(self.exporter)
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

    def discard(self) -> None:
        """Close both files and delete what opening them created (a failed `configure()`)."""
        if self.exporter is not None:
            self.exporter.remove()
        if self.snapshots is not None:
            self.snapshots.remove()
