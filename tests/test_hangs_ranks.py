"""A real 4-rank gloo job whose rank 2 hangs in `data`: every file tells it, summary names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from looptrace._cli import main
from tests.helpers.hangs import (
    free_ports,
    hang_lines,
    kill_all,
    start_ranks,
    step_open_seconds,
    wait_for,
)

pytest.importorskip("torch.distributed")

WORKER = Path(__file__).parent / "helpers" / "hang_rank_worker.py"
WORLD = 4


def _summary(capsys: pytest.CaptureFixture[str], files: list[Path]) -> str:
    assert main(["summary", *map(str, files)]) == 0
    return capsys.readouterr().out


def test_a_rank_stuck_in_data_is_named_by_every_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every file gets a hang line within twice the threshold, summary names rank 2 and data."""
    files = [tmp_path / f"snap.rank{rank}.jsonl" for rank in range(WORLD)]
    port = free_ports(WORLD)
    args = [str(tmp_path / "store"), str(tmp_path / "snap.jsonl"), str(port)]
    procs = start_ranks(WORKER, WORLD, args)
    try:
        hangs = wait_for(
            lambda: all(hang_lines(f) for f in files) and [hang_lines(f)[0] for f in files],
            180,
            "hang line in every rank's file",
        )
        for hang in hangs:
            assert hang["seconds"] <= 2 * hang["threshold_s"], hang
        assert [h["rank"] for h in hangs] == [0, 1, 2, 3]
        live = _summary(capsys, files)
        first = step_open_seconds(port + 2)  # rank 2's gauge grows while it hangs
        assert first is not None
        wait_for(lambda: (step_open_seconds(port + 2) or 0) > first + 1, 30, "a growing gauge")
    finally:
        outputs = kill_all(procs)  # SIGKILL: no exit flush
    assert "hang: rank 2 stuck in root.train.data for" in live, outputs
    assert "at step 8; ranks 0, 1, 3 waiting in root.train.backward" in live
    after = _summary(capsys, files)  # the killed ranks' files, read again
    assert "hang: rank 2 stuck in root.train.data for" in after
    assert "at step 8; ranks 0, 1, 3 waiting in root.train.backward" in after
