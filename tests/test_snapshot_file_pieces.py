"""The snapshot file's writer encodes a window a few paths at a time, letting steps run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from looptrace._export import snapshot_file
from looptrace.testing import capture


def test_a_window_of_many_paths_is_encoded_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 paths: the GIL is released after every YIELD_EVERY paths; the line is the same."""
    released: list[float] = []
    monkeypatch.setattr(snapshot_file.time, "sleep", released.append)
    cap = capture(snapshot_file=tmp_path / "s.jsonl", trace_every=0, max_paths=200)
    train = cap.lt.timer("t")
    for i in range(99):
        train.record(f"s{i}")
        cap.clock.advance(0.001)
    train.stop()
    snap = cap.lt.reset()
    cap.lt.shutdown()
    line = json.loads((tmp_path / "s.jsonl").read_text().splitlines()[0])
    assert line["stats"] == {path: stats.to_dict() for path, stats in snap.items()}
    assert len(snap) == 100
    assert released == [0] * (100 // snapshot_file.YIELD_EVERY)
