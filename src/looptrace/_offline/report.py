"""`looptrace report`: read the inputs, refuse to overwrite one, write the page."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from looptrace._offline.inputs import expand_inputs
from looptrace._offline.reader import InputError, Warn
from looptrace._offline.report_data import ReportData, load_report
from looptrace._offline.report_html import render


def write_report(names: Sequence[str], output: Path, warn: Warn, made_by: str) -> ReportData:
    """Write the HTML report of the input files to `output`; return what it shows.

    Raises:
        InputError: `output` is one of the inputs, or no input is readable.

    """
    for name in expand_inputs(names, lambda _message: None):
        if _same(Path(name), output):
            raise InputError(f"{output}: is one of the input files; choose another output")
    data = load_report(names, warn)
    page = render(data, made_by)
    output.write_text(page, encoding="utf-8")
    return data


def _same(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return one.resolve() == other.resolve()
