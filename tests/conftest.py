"""Shared fixtures: every test gets a fresh looptrace on a fake clock (see looptrace.testing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from looptrace.testing import Capture, capture


@pytest.fixture
def cap() -> Iterator[Capture]:
    """Yield a looptrace on a fake clock at 0 s, spans and metrics in memory; shut it down."""
    result = capture()
    yield result
    result.lt.shutdown()


def counts(snapshot: object) -> dict[str, int]:
    """Return `{path: count}` of a snapshot."""
    from looptrace import Snapshot

    assert isinstance(snapshot, Snapshot)
    return {path: stats.count for path, stats in snapshot.items()}


def totals(snapshot: object) -> dict[str, float]:
    """Return `{path: total seconds}` of a snapshot, rounded to the nanosecond."""
    from looptrace import Snapshot

    assert isinstance(snapshot, Snapshot)
    return {path: round(stats.total, 9) for path, stats in snapshot.items()}
