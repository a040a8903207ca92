"""Recorded runs whose section name is hostile: escape sequences, OSC titles, bidi overrides."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

from .runs import record_run

# One name per way a terminal or a page can be made to show what is not there.
HOSTILE = {
    "esc": "\x1b[2J\x1b[Hcleared",  # ESC: clear the screen, move home
    "csi": "\x9b31mred",  # the one-byte (C1) CSI
    "osc": "\x1b]0;pwned title\x07x",  # OSC: set the window title
    "cr": "fake\rforward",  # carriage return: overwrite the row's start
    "newline": "new\nroot.fake  1  2 ms",  # a newline: a fake row of the table
    "bidi": "evil\u202etxt.exe",  # right-to-left override
}


def hostile_run(directory: Path, name: str, *, forward_ms: float = 50) -> Path:
    """Record a run into `directory` whose `data` section is named `name`; return `directory`."""
    run = record_run(directory, forward_ms=forward_ms)
    path = "root.training." + name
    lines = [json.loads(line) for line in run.snapshot_file.read_text().splitlines()]
    for line in lines:
        stats = line["stats"]
        line["stats"] = {(path if k == "root.training.data" else k): v for k, v in stats.items()}
        for finding in line.get("findings", []):
            finding["message"] += " in " + name
    run.snapshot_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    requests = [json.loads(line) for line in run.span_file.read_text().splitlines()]
    for request in requests:
        for span in _spans(request):
            if span["name"] == "data":
                span["name"] = name
                for attribute in span["attributes"]:
                    if attribute["key"] == "looptrace.path":
                        attribute["value"] = {"stringValue": path}
    run.span_file.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return directory


def _spans(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        span
        for resource in request["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def shown_raw(text: str) -> list[str]:
    """Return the characters of `text` a terminal or page would act on (a line break aside).

    Control and format characters (ESC, CR, bidi overrides) and line or paragraph separators.
    """
    acting = {"Cc", "Cf", "Zl", "Zp"}
    return [c for c in text if unicodedata.category(c) in acting and c != "\n"]
