"""JSON lines parse to the same values with orjson and without it (the pure-Python path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from looptrace._cli import main
from looptrace._offline import json_loads

from .helpers.runs import record_run


@pytest.mark.parametrize(
    "line",
    [
        b'{"a": 1, "b": [1.5, null, true], "c": "\\u202e"}',
        b'{"total": NaN, "n": 99999999999999999999999}',  # json.dumps writes these; orjson not
        b"-0.0",
    ],
)
def test_every_line_parses_alike_with_either_parser(
    line: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line orjson refuses falls back to `json`: both paths give equal values."""
    fast = json_loads.loads(line)
    monkeypatch.setattr(json_loads, "orjson", None)
    slow = json_loads.loads(line)
    assert repr(fast) == repr(slow)
    assert json_loads.backend() == "json"


@pytest.mark.parametrize("line", [b"{not json", b"[" * 100_000 + b"]" * 100_000])
def test_a_bad_line_raises_what_the_readers_catch(line: bytes) -> None:
    """Garbage and nesting too deep: ValueError or RecursionError, as `json` raises."""
    with pytest.raises((ValueError, RecursionError)):
        json_loads.loads(line)


def test_the_commands_print_the_same_without_orjson(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`summary` of span and snapshot files: the same output on the pure-Python path."""
    run = record_run(tmp_path)
    outputs = []
    for parser in (json_loads.orjson, None):
        monkeypatch.setattr(json_loads, "orjson", parser)
        for path in (run.span_file, run.snapshot_file):
            assert main(["summary", str(path)]) == 0
            outputs.append(capsys.readouterr())
    assert outputs[:2] == outputs[2:]
