"""Rendering rich views to text in the tests."""

from __future__ import annotations

import io

from rich.console import Console


def text_lines(renderable: object) -> list[str]:
    """Return the lines a 100-column terminal shows for `renderable`, right-stripped."""
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]
