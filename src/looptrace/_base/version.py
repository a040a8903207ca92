"""looptrace's version, read from the installed package's metadata: `pyproject.toml` is the source.

Read on first use, not at import: `import looptrace` stays free of `importlib.metadata`.
"""

from __future__ import annotations

import functools

DISTRIBUTION = "looptrace"


@functools.cache
def version() -> str:
    """Return the installed looptrace's version (`0+unknown` when run from an uninstalled tree)."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - ~10 ms

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"
