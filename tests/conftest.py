"""Shared fixtures, and the `slow` marker: `pytest -m "not slow"` runs the in-process tests.

A test is `slow` when it starts another process or a real server: its body, a helper or
fixture of its module that it uses (transitively), names one of `SLOW_NAMES`. New test files
are classified by what they do, with nothing to register; `@pytest.mark.slow` marks a test
explicitly.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from looptrace.testing import Capture, capture

SLOW_NAMES = frozenset(
    {
        "subprocess",  # another Python, a CLI, promtool, a rank of a torch.distributed job
        "fork",
        "OtlpReceiver",  # the real OTLP receivers of tests/otlp_server.py
        "StalledServer",
        "Prometheus",  # real servers of tests/servers.py
        "Mlflow",
        "free_port",  # a port for looptrace's Prometheus endpoint, a real HTTP server
    }
)


@functools.cache
def slow_functions(path: Path) -> frozenset[str]:
    """Return the module-level functions (tests, helpers, fixtures) of a file that are slow."""
    names: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            used = names[node.name] = set()
            for statement in node.body:
                for inner in ast.walk(statement):
                    if isinstance(inner, ast.Name):
                        used.add(inner.id)
                    elif isinstance(inner, ast.Attribute):
                        used.add(inner.attr)
    slow = {name for name, used in names.items() if used & SLOW_NAMES}
    while grown := {name for name, used in names.items() if used & slow} - slow:
        slow |= grown
    return frozenset(slow)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that start a process or a real server `slow`."""
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        slow = slow_functions(Path(item.path))
        if item.originalname in slow or slow.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)


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
