"""Which tests are slow: they start another process or a real server."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SLOW_NAMES = frozenset(
    {
        "subprocess",  # another Python, a CLI, promtool, a rank of a torch.distributed job
        "fork",
        "OtlpReceiver",  # the real OTLP receivers of tests/helpers/otlp_server.py
        "StalledServer",
        "Prometheus",  # real servers of tests/helpers/servers.py
        "Mlflow",
        "free_port",  # a port for looptrace's Prometheus endpoint, a real HTTP server
    }
)


# Names too common to mark a test by (a worker script's `main`, `gloo_files.run`): tests that
# use those helpers are marked `@pytest.mark.slow` where they stand.
_GENERIC = frozenset({"main", "run", "start"})


@functools.cache
def slow_helpers() -> frozenset[str]:
    """Return the functions of tests/helpers/ that start a process or a server (`run_ranks`)."""
    found: set[str] = set()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        found |= _slow_in(path, SLOW_NAMES)
    return frozenset(found - _GENERIC)


@functools.cache
def slow_functions(path: Path) -> frozenset[str]:
    """Return the module-level functions (tests, helpers, fixtures) of a file that are slow.

    A function is slow when it uses a name of `SLOW_NAMES` or a slow helper of tests/helpers/,
    or calls a slow function of its own file.
    """
    return _slow_in(path, SLOW_NAMES | slow_helpers())


def _slow_in(path: Path, markers: frozenset[str]) -> frozenset[str]:
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
    slow = {name for name, used in names.items() if used & markers}
    while grown := {name for name, used in names.items() if used & slow} - slow:
        slow |= grown
    return frozenset(slow)
