r"""MkDocs hook: a table cell's code may hold a pipe written `\|`, as GitHub needs it.

GitHub splits table rows on every unescaped pipe, code spans included, so the settings table
(rendered by `readme_rows()`) writes `OTEL_EXPORTER_OTLP_[TRACES_\|METRICS_]ENDPOINT`. Python-
Markdown keeps pipes inside code spans in their cell and would show the backslash: this hook
drops it inside the code spans of table rows, so both render the same.
"""

from __future__ import annotations

import re
from typing import Any

_CODE = re.compile(r"`[^`]*`")


def _unescape(match: re.Match[str]) -> str:
    return match.group(0).replace("\\|", "|")


def on_page_markdown(markdown: str, **_: Any) -> str:
    r"""Return the page with `\|` inside the code spans of table rows written as `|`."""
    return "\n".join(
        _CODE.sub(_unescape, line) if line.lstrip().startswith("|") else line
        for line in markdown.split("\n")
    )
