"""The OpenTelemetry exporters' own log lines, folded into looptrace's once-per-kind reporting.

With a collector down, the SDK's batch processor and the OTLP exporters log a line per failed
or retried batch ("Transient error ... retrying", "Failed to export span batch ..."), with
tracebacks, hundreds per run, and a request error can quote the request's headers. looptrace
counts lost spans itself, so these records are replaced by one warning line per kind (logger
and message template), logged at INFO on the `looptrace.sdk` logger with every configured
header value masked; the loss itself is looptrace's one warning.

Only looptrace's own exporters are folded: their calls run inside `ours()`, and a record
logged outside it (the application's exporters, on any thread) passes unchanged. The filter
is on the SDK's loggers only while a configured looptrace exports (`fold()` to `release()`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar
from urllib.parse import quote

_log = logging.getLogger("looptrace.sdk")

# Loggers that exist before the exporter modules are imported; those of the OTLP exporters
# are found by prefix when `fold()` runs (their modules are imported by then).
_SDK_LOGGERS = ("opentelemetry.sdk._shared_internal", "opentelemetry.sdk.trace.export")
_EXPORTER_PREFIX = "opentelemetry.exporter.otlp"
_MASK = "***"
_LONGEST = 300
_T = TypeVar("_T")


class _Scope(threading.local):
    depth = 0  # looptrace's exporter calls under way on this thread


_SCOPE = _Scope()


def as_ours(work: Callable[[], _T]) -> Callable[[], _T]:
    """Return `work` run inside `ours()` (for work handed to another thread)."""

    def run() -> _T:
        with ours():
            return work()

    return run


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
        if not _SCOPE.depth:
            return True  # not looptrace's exporters: the record goes on as it is
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


class _Installed:
    """The loggers the filter is on, and how many export pipelines want it there."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0  # export pipelines between `fold()` and `release()`
        self.in_flight = 0  # calls of looptrace's exporters under way, on any thread
        self.loggers: list[logging.Logger] = []

    def remove_when_unused(self) -> None:
        """Take the filter off once no pipeline wants it and no call needs it; hold `lock`."""
        if self.users or self.in_flight:
            return
        for logger in self.loggers:
            logger.removeFilter(_FOLD)
        self.loggers.clear()


_FOLD = _Fold()
_INSTALLED = _Installed()


def _renew_locks() -> None:  # another thread may have held one while forking
    _FOLD._lock = threading.Lock()
    _INSTALLED.lock = threading.Lock()
    _INSTALLED.in_flight = 0  # the calls under way were the parent's threads'


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_locks)


@contextmanager
def ours() -> Iterator[None]:
    """Mark the records logged on this thread meanwhile as looptrace's exporters' own.

    The filter stays on the loggers until the last such call ends, even past `release()`:
    an exporter still retrying after `shutdown()` gave up on it stays folded.
    """
    _SCOPE.depth += 1
    with _INSTALLED.lock:
        _INSTALLED.in_flight += 1
    try:
        yield
    finally:
        _SCOPE.depth -= 1
        with _INSTALLED.lock:
            _INSTALLED.in_flight -= 1
            _INSTALLED.remove_when_unused()


def fold(secrets: Iterable[str] = ()) -> None:
    """Fold looptrace's exporters' log records from now on, masking `secrets` (header values).

    Each call is matched by one `release()`.
    """
    values = {value for value in secrets if len(value) >= 4}
    values |= {quote(value) for value in values} | {quote(value, safe="") for value in values}
    _FOLD.add_secrets(values)
    names = [
        *_SDK_LOGGERS,
        *(n for n in list(logging.root.manager.loggerDict) if n.startswith(_EXPORTER_PREFIX)),
    ]
    with _INSTALLED.lock:
        _INSTALLED.users += 1
        for name in names:
            logger = logging.getLogger(name)
            if _FOLD not in logger.filters:
                logger.addFilter(_FOLD)
                _INSTALLED.loggers.append(logger)


def release() -> None:
    """End one `fold()`; the last one takes the filter off the SDK's loggers.

    Off once looptrace's exporter calls still under way (see `ours()`) have ended.
    """
    with _INSTALLED.lock:
        _INSTALLED.users = max(0, _INSTALLED.users - 1)
        _INSTALLED.remove_when_unused()


def folded() -> int:
    """Return how many exporter log records were folded so far (for tests)."""
    return _FOLD.folded
