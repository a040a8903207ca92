"""Offline outputs: spans as OTLP/JSON lines and snapshots as JSON lines, one file per rank.

Both are append-only JSON Lines files (`LineFile`): a killed process leaves at most one
truncated last line, which every reader skips with a warning.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from looptrace._base.errors import ConfigError
from looptrace._distributed.ranks import RankInfo
from looptrace._export.encodable import encodable_spans
from looptrace._export.extras import needs_files_extra
from looptrace._export.line_file import FLUSH_TIMEOUT_S, LineFile, loss_line
from looptrace._export.outputs import Outputs
from looptrace._export.snapshot_file import SnapshotFileWriter
from looptrace._export.span_file import SpanFileProcessor
from looptrace._stats.health import Incidents

__all__ = [
    "FLUSH_TIMEOUT_S",
    "FileOutputs",
    "OtlpJsonFileExporter",
    "SnapshotFileWriter",
    "rank_path",
]

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


class OtlpJsonFileExporter(SpanExporter):
    """Writes each export batch as one OTLP/JSON line (`{"resourceSpans": [...]}`).

    `SpanFileProcessor` calls it off the training thread. A batch that cannot be written is
    counted in `Looptrace.health()` (`dropped_spans`, and one `internal_errors` per failure,
    the first logged) and recorded by a loss line (`{"kind": "looptrace.lost", "spans": N}`)
    written before the next batch that fits, so `looptrace summary` reports it.
    """

    def __init__(self, path: Path, incidents: Incidents | None = None) -> None:
        with needs_files_extra(ConfigError, "trace_file"):
            from looptrace._export.otlp_json import encode_line  # noqa: PLC0415 - needs the extra
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
            line = self._encode(encodable_spans(spans))  # one odd name never fails it
        except Exception:
            self._incidents.failed(f"trace file {self.path}")
            self._lost(len(spans))
            return SpanExportResult.FAILURE
        try:
            self._file.write(loss_line("spans", self._unrecorded) + line)
        except OSError as error:  # the spans are counted in dropped_spans, not as an error
            self._incidents.said_once(
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

    def attach(self, provider: object | None, outputs: Outputs) -> None:
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
            outputs.on_reset.append(self.snapshots)
            outputs.on_shutdown.append(self.snapshots.close)

    @property
    def active(self) -> bool:
        """Whether any file is written."""
        return self.exporter is not None or self.snapshots is not None

    def flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> bool:
        """Write the spans and windows still queued for the files, within `timeout_s` each."""
        ok = True
        if self.processor is not None:
            ok = self.processor.force_flush(int(timeout_s * 1e3))
        if self.snapshots is not None:
            ok = self.snapshots.flush(timeout_s) and ok
        return ok

    def discard(self) -> None:
        """Close both files and delete what opening them created (a failed `configure()`)."""
        if self.exporter is not None:
            self.exporter.remove()
        if self.snapshots is not None:
            self.snapshots.remove()
