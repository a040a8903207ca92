"""The modules mypyc compiles at installation: the hot path, declared once.

`COMPILED` names what `record()`, sections and `reset()` run. The rest of `_core/` and
`_stats/` (clocks, snapshots, the function wrappers: closures over the user's functions, async
generators among them), `_base/` (errors) and `_diagnosis/` stay interpreted. `setup.py` reads
this list from the file's text (a build cannot import the package it builds), `_core/build.py`
chooses between the two cores by it, and `tests/test_modules.py` checks it against the source
tree. The rules a compiled module follows are in docs/architecture.md.
"""

from __future__ import annotations

from typing import Final

# A literal tuple of module names: setup.py evaluates it with `ast.literal_eval`.
COMPILED: Final = (
    "looptrace._core.calls",
    "looptrace._core.device",
    "looptrace._core.engine",
    "looptrace._core.entry",
    "looptrace._core.ids",
    "looptrace._core.intervals",
    "looptrace._core.iterate",
    "looptrace._core.ranges",
    "looptrace._core.sampling",
    "looptrace._core.slow_laps",
    "looptrace._core.spans",
    "looptrace._core.states",
    "looptrace._core.threadkey",
    "looptrace._core.timer",
    "looptrace._core.windows",
    "looptrace._stats.aggregator",
    "looptrace._stats.buckets",
    "looptrace._stats.health",
    "looptrace._stats.sketch",
    "looptrace._stats.tally",
)
# The C helper of the compiled core, built beside the compiled modules (`_core/_threaddict.c`).
C_HELPER: Final = "looptrace._core._threaddict"
