"""The `files` extra that span files need: the one line that says it is missing, and its guard.

Span files are OTLP/JSON; writing and reading them needs the OTLP protocol classes, which
`pip install 'looptrace[files]'` installs. Whoever writes or reads them imports those modules
in `needs_files_extra`, which turns their absence into one line for the user.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

FILES_EXTRA_MISSING = "span files need the OTLP protocol classes: pip install 'looptrace[files]'"


@contextmanager
def needs_files_extra(error: Callable[[str], Exception], what: str = "") -> Iterator[None]:
    """Raise `error(line)` where the block fails to import what the `files` extra installs.

    `what` (e.g. `"trace_file"`) starts the line where it is given.
    """
    try:
        yield
    except ImportError:
        raise error(f"{what}: {FILES_EXTRA_MISSING}" if what else FILES_EXTRA_MISSING) from None
