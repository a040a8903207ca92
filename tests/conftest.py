"""Shared fixtures, the `slow` and `property` markers, and the Hypothesis profiles.

`python -m pytest` runs the fast tier (`-m "not slow"`, in pyproject.toml); `-m slow` runs
the rest, `-m "slow or not slow"` everything. Property tests (`property`) draw the same
examples on every run in the default profile (derandomized, no example database), so a
result depends on the code alone; `--hypothesis-profile=random --hypothesis-seed=N` searches
anew and replays seed N.

A test is `slow` when it starts another process or a real server: its body, a helper or
fixture of its module that it uses (transitively), names one of `SLOW_NAMES`. New test files
are classified by what they do, with nothing to register; `@pytest.mark.slow` marks a test
explicitly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from looptrace.testing import Capture, capture

from .helpers.markers import slow_functions

# Speed is never asserted in a test (benchmarks/ measure it): no deadline, no slowness check.
_QUIET = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
hypothesis_settings.register_profile("default", derandomize=True, database=None, **_QUIET)
hypothesis_settings.register_profile("random", derandomize=False, database=None, **_QUIET)
hypothesis_settings.load_profile("default")


# What the test extra installs beside the core: a module that cannot import one is skipped,
# with the reason, instead of failing the collection of the whole run.
OPTIONAL = frozenset(
    {
        "cryptography", "grpc", "lightning", "matplotlib", "mlflow", "playwright", "promql_parser",
        "prometheus_client", "psutil", "rich", "tensorboard", "torch", "transformers", "tqdm",
        "wandb", "yaml", "orjson", "opentelemetry_instrumentation",
    }
)  # fmt: skip


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[pytest.CollectReport]:
    """Skip a test module whose optional dependency is missing, naming it; fail on the rest."""
    report: pytest.CollectReport = yield
    missing = missing_optional(report) if report.failed else None
    if missing is not None and isinstance(collector, pytest.Module):
        report.outcome = "skipped"
        report.longrepr = (str(collector.path), 0, f"Skipped: needs {missing} (the test extra)")
    return report


def missing_optional(report: pytest.CollectReport) -> str | None:
    """Return the optional module whose absence failed a collection report, else None."""
    text = str(report.longrepr)
    for line in reversed(text.splitlines()):
        if "ModuleNotFoundError: No module named " in line:
            name = line.split("No module named ", 1)[1].strip().strip("'\"").split()[0]
            top = name.strip("'\"").split(".")[0]
            return top if top in OPTIONAL else None
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that start a process or a real server `slow`, Hypothesis's `property`."""
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        if getattr(item.obj, "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)
        slow = slow_functions(Path(item.path))
        if item.originalname in slow or slow.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def cap() -> Iterator[Capture]:
    """Yield a looptrace on a fake clock at 0 s, spans and metrics in memory; shut it down."""
    result = capture()
    yield result
    result.lt.shutdown()
