"""Child processes of the tests: a bare environment that still runs the code under test."""

from __future__ import annotations

import os
from collections.abc import Mapping


def bare_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return `PATH`, the `PYTHONPATH` of this run (if any) and `extra`, nothing else.

    A child then imports the same looptrace as the test (a source tree on `PYTHONPATH`, or the
    installed one), and no `OTEL_*`/`LOOPTRACE_*` setting of the developer's shell leaks in.
    """
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update(extra or {})
    return env
