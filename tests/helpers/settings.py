"""The export settings a test resolves."""

from __future__ import annotations

from typing import Any

from looptrace._export.settings import (
    ExportOptions,
    ExportSettings,
    resolve,
)


def own(environ: dict[str, str] | None = None, **options: Any) -> ExportSettings:
    """Resolve for pipelines looptrace owns, with only `environ` as the environment."""
    return resolve(ExportOptions(**options), environ or {}, owns_traces=True, owns_metrics=True)
