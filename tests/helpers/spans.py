"""Reading span files back in the tests."""

from __future__ import annotations

import json
from pathlib import Path


def spans_in(path: Path) -> int:
    """Return how many spans the OTLP/JSON lines of a span file hold."""
    return sum(
        len(scope["spans"])
        for line in path.read_text().splitlines()
        if "resourceSpans" in line
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
    )
