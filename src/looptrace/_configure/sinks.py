"""The files and exporters of one `configure()`, opened before anything is wired.

They are made last among what can fail, files then exporters (a listening port); a failure
releases what they opened and removes the files they created, so a failed `configure()`
leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass

from looptrace._configure.providers import owns_traces
from looptrace._configure.tracing import TracingSources
from looptrace._export.exporters import ExportPipeline, export_pipeline
from looptrace._export.files import FLUSH_TIMEOUT_S, FileOutputs
from looptrace._export.run_settings import RunSettings
from looptrace._export.settings import ExportOptions


@dataclass(frozen=True)
class Sinks:
    """The span and snapshot files, and the exporters (None when nothing is exported)."""

    files: FileOutputs
    pipeline: ExportPipeline | None

    @property
    def active(self) -> bool:
        """Whether anything is exported or written."""
        return self.pipeline is not None or self.files.active

    @property
    def timeout_s(self) -> float:
        """How long a flush of everything may take: the exporters' timeout, else the files'."""
        return FLUSH_TIMEOUT_S if self.pipeline is None else self.pipeline.settings.timeout_s

    def flush(self) -> bool:
        """Deliver what the exporters and the files hold, each within `timeout_s`."""
        ok = self.files.flush(self.timeout_s)
        if self.pipeline is not None:
            ok = self.pipeline.flush() and ok
        return ok


def open_sinks(
    settings: RunSettings, options: ExportOptions, sources: TracingSources, *, owns_metrics: bool
) -> Sinks:
    """Open the files, then resolve and start the exporters; undo the files if that fails.

    Raises:
        ConfigError: a file that cannot be written or an exporter setting that cannot be used.

    """
    files = FileOutputs(
        trace_file=settings.trace_file,
        snapshot_file=settings.snapshot_file,
        rank=sources.rank,
        incidents=sources.incidents,
        tracing=not settings.disabled,
    )
    try:
        files.check_provider(sources.tracer_provider)
        pipeline = export_pipeline(
            options,
            owns_traces=owns_traces(sources.tracer_provider),
            owns_metrics=owns_metrics,
            disabled=settings.disabled,
            resource=sources.resource,
            rank=sources.rank,
            incidents=sources.incidents,
            outputs=sources.outputs,
        )
    except BaseException:
        files.discard()
        raise
    return Sinks(files, pipeline)
