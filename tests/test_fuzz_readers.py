"""Mutated real span, snapshot and metrics lines: every offline reader skips or uses them."""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from looptrace._export.otlp_json import to_json
from looptrace._offline.perfetto import chrome_trace
from looptrace._offline.plot_data import from_spans, from_windows
from looptrace._offline.reader import InputError, open_inputs
from looptrace._offline.replay import replay
from looptrace._offline.span_records import load_spans
from looptrace._offline.summary import render_summary, summarize_spans, summarize_windows
from looptrace._offline.window_records import load_windows

from .helpers.examples import examples
from .helpers.runs import record_run

HOSTILE = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            -1,
            0,
            2**64,
            10**400,
            1e300,
            -1e300,
            math.inf,
            math.nan,
            "",
            "x" * 3,
            "ff" * 8,
            [],
            {},
            [[[[]]]],
            {"a": {"b": []}},
            "1e400",
            "-9223372036854775809",
        ]
    ),
    st.integers(),
    st.floats(),
    st.text(max_size=4),
)


@functools.cache
def _real_lines() -> dict[str, list[str]]:
    """Return the lines of a recorded run's span and snapshot files, and of a metrics file."""
    with tempfile.TemporaryDirectory(prefix="looptrace-fuzz-") as directory:
        run = record_run(Path(directory), data_ms=(10, 20, 30), reset_every=1)
        spans = run.span_file.read_text().splitlines()
        snapshots = run.snapshot_file.read_text().splitlines()
    metrics = []
    for line in snapshots:
        record = json.loads(line)
        flat = {"step": record["step"]}
        for path, stats in record["stats"].items():
            for stat, value in stats.items():
                if stat != "buckets":
                    flat[f"timing.{path}.{stat}"] = value
        metrics.append(json.dumps(flat))
    return {
        "span": spans,
        "snapshot": snapshots,
        "metrics": metrics,
    }


def _slots(value: Any) -> list[tuple[Any, Any]]:
    """Return every (container, key) of a parsed JSON value, depth first."""
    found: list[tuple[Any, Any]] = []
    stack = [value]
    while stack:
        current = stack.pop()
        items = current.items() if isinstance(current, dict) else enumerate(current)
        for key, item in list(items):
            found.append((current, key))
            if isinstance(item, dict | list):
                stack.append(item)
    return found


@st.composite
def mutated(draw: st.DrawFn, real: list[str]) -> tuple[list[str], int]:
    """Return a file's lines with one real line mutated, and that line's index."""
    lines = list(real)
    index = draw(st.integers(0, len(lines) - 1))
    record = copy.deepcopy(json.loads(lines[index]))
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(record)
        if not slots:
            break
        container, key = draw(st.sampled_from(slots))
        if isinstance(container, dict) and draw(st.booleans()):
            del container[key]
        else:
            container[key] = copy.deepcopy(draw(HOSTILE))  # the samples are shared objects
    text = json.dumps(record)
    if draw(st.booleans()):  # and sometimes damage the text itself
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.sampled_from(["", "\x00", "}", "[" * 5000, '"', "é"]))
    lines[index] = text
    return lines, index


_INPUT = Path(tempfile.gettempdir()) / f"looptrace-fuzz-{os.getpid()}.jsonl"


def _write(lines: list[str]) -> Path:
    path = _INPUT
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")
    return path


class _Sink:
    """A replay sender that accepts everything."""

    def __init__(self) -> None:
        self.spans = 0

    def send(self, request: Any) -> int:
        self.spans += len(to_json(request)["resourceSpans"])
        return 0

    def close(self) -> None:
        """Nothing to close."""


def _read_everything(path: Path, kind: str) -> int:
    """Run every reader of the offline commands on `path`; return the records it kept."""
    warnings: list[str] = []
    try:
        found, files = open_inputs([str(path)], warnings.append)
    except InputError:
        return 0
    if found == "span":
        spans = load_spans(files, warnings.append)
        if not spans:
            return 0
        summary = summarize_spans(spans)
        render_summary(summary)
        json.dumps(chrome_trace(spans))
        from_spans(spans, summary, None)
        replay(files, _Sink(), warnings.append, threading.Event())
        kept = len(spans)
    else:
        windows = load_windows(found, files, warnings.append)
        if not windows:
            return 0
        summary = summarize_windows(windows)
        render_summary(summary)
        from_windows(windows, summary, None)
        kept = len(windows)
    assert all("\n" not in warning for warning in warnings)
    return kept


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_reader_raises_on_a_mutated_line(data: st.DataObject) -> None:
    """Summary, plot data, Perfetto and replay readers skip or use a mutated line, never raise."""
    real = _real_lines()
    kind = data.draw(st.sampled_from(sorted(real)))
    lines, index = data.draw(mutated(real[kind]))
    kept = _read_everything(_write(lines), kind)
    if index > 0:  # the kind comes from the first line: the other lines are all used
        good = _read_everything(_write([line for i, line in enumerate(lines) if i != index]), kind)
        assert kept >= good


@pytest.mark.parametrize("where", [0, 1], ids=["first line", "later line"])
@pytest.mark.parametrize(
    "change",
    [
        {"kind": []},
        {"kind": {"a": 1}},
        {"findings": [{"kind": "input_bound", "severity": "warning", "message": "m", "path": []}]},
        {"findings": [{"kind": "input_bound", "severity": "warning", "message": "m", "rank": {}}]},
    ],
    ids=["kind a list", "kind an object", "finding path a list", "finding rank an object"],
)
def test_an_unhashable_value_where_a_name_belongs_is_skipped(
    where: int, change: dict[str, Any]
) -> None:
    """A snapshot line whose kind or finding's path or rank is a list or object: skipped."""
    lines = list(_real_lines()["snapshot"])
    record = json.loads(lines[where])
    record.update(change)
    lines[where] = json.dumps(record)
    assert _read_everything(_write(lines), "snapshot") == len(lines) - 1
