"""One JSON line parsed: with orjson where the `files` extra installed it, else with `json`.

orjson parses looptrace's span and snapshot lines several times faster than `json` (the
figures are in docs/performance.md). A line orjson refuses (a `NaN` literal, an integer
beyond 64 bits) is parsed again by `json`, so both give the same values for every line;
a line neither can parse raises `ValueError` (or `RecursionError`, nested too deep).
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # the pure-Python path: correct, slower
    orjson = None  # type: ignore[assignment]


def loads(raw: bytes) -> Any:
    """Return the value of one JSON line."""
    if orjson is not None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def backend() -> str:
    """Return the name of the parser in use: `orjson` or `json`."""
    return "orjson" if orjson is not None else "json"
