"""The OpenTelemetry exporters' own log lines, folded into looptrace's once-per-kind reporting.

With a collector down, the SDK's batch processor and the OTLP exporters log a line per failed
or retried batch ("Transient error ... retrying", "Failed to export span batch ..."), with
tracebacks, hundreds per run, and a request error can quote the request's headers. looptrace
counts lost spans itself, so these records are replaced by one warning line per kind (logger
and message template), logged at INFO on the `looptrace.sdk` logger with every configured
header value masked; the loss itself is looptrace's one warning.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from urllib.parse import quote

_log = logging.getLogger("looptrace.sdk")

# Loggers that exist before the exporter modules are imported; those of the OTLP exporters
# are found by prefix when `fold()` runs (their modules are imported by then).
_SDK_LOGGERS = ("opentelemetry.sdk._shared_internal", "opentelemetry.sdk.trace.export")
_EXPORTER_PREFIX = "opentelemetry.exporter.otlp"
_MASK = "***"
_LONGEST = 300


class _Fold(logging.Filter):
    """Drops each record; logs the first of each kind as one masked INFO line."""

    def __init__(self) -> None:
        super().__init__("looptrace-fold")
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self.secrets: set[str] = set()
        self.folded = 0

    def add_secrets(self, values: set[str]) -> None:
        """Mask these values from now on."""
        with self._lock:
            self.secrets |= values

    def filter(self, record: logging.LogRecord) -> bool:
        kind = f"{record.name}:{record.msg}"
        with self._lock:
            self.folded += 1
            first = kind not in self._seen
            self._seen.add(kind)
            secrets = sorted(self.secrets, key=len, reverse=True)
        if first and record.levelno >= logging.WARNING:
            _log.info(
                "looptrace: an OpenTelemetry exporter reported: %s (further reports like it "
                "are not logged; lost spans are counted in lt.health().dropped_spans)",
                _masked(record, secrets),
            )
        return False


def _masked(record: logging.LogRecord, secrets: Iterable[str]) -> str:
    """Return the record's message on one line, cut short, with every secret masked."""
    try:
        text = record.getMessage()
    except Exception:  # a record whose arguments do not fit its template
        text = str(record.msg)
    for secret in secrets:
        text = text.replace(secret, _MASK)
    flat = " ".join(text.split())
    return flat if len(flat) <= _LONGEST else flat[: _LONGEST - 1] + "…"


_FOLD = _Fold()


def fold(secrets: Iterable[str] = ()) -> None:
    """Fold the exporters' log records from now on, masking `secrets` (header values)."""
    values = {value for value in secrets if len(value) >= 4}
    values |= {quote(value) for value in values} | {quote(value, safe="") for value in values}
    _FOLD.add_secrets(values)
    names = [
        *_SDK_LOGGERS,
        *(n for n in list(logging.root.manager.loggerDict) if n.startswith(_EXPORTER_PREFIX)),
    ]
    for name in names:
        logger = logging.getLogger(name)
        if _FOLD not in logger.filters:
            logger.addFilter(_FOLD)


def folded() -> int:
    """Return how many exporter log records were folded so far (for tests)."""
    return _FOLD.folded
