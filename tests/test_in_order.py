"""Closed windows reach the outputs in the order they closed, whichever thread closed them."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from looptrace import Snapshot
from looptrace.testing import capture


def test_a_window_closed_later_waits_for_the_delivery_of_the_one_before(tmp_path: Path) -> None:
    """A reset() racing another thread's slow delivery: outputs and hooks get them in order."""
    cap = capture(snapshot_file=tmp_path / "s.jsonl", trace_every=0)
    entered, release = threading.Event(), threading.Event()

    def slow_first(snapshot: Snapshot) -> None:
        if not entered.is_set():
            entered.set()
            release.wait(timeout=1.0)  # the later window waits for this one meanwhile

    seen: list[int] = []
    cap.lt.on_reset(slow_first)
    cap.lt.on_reset(lambda snapshot: seen.append(snapshot.end_ns))
    train = cap.lt.timer("train")
    train.record("step")
    cap.clock.advance(1.0)
    first = threading.Thread(target=cap.lt.reset)
    first.start()
    assert entered.wait(timeout=30)
    cap.clock.advance(1.0)
    train.record("step")
    second = cap.lt.reset()
    release.set()
    first.join(timeout=30)
    cap.lt.shutdown()
    assert len(seen) == 3
    assert seen == sorted(seen)
    assert seen[1] == second.end_ns
    lines = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [line["end_ns"] for line in lines] == seen


def test_a_hook_that_closes_a_window_does_not_wait_for_itself(tmp_path: Path) -> None:
    """An on_reset hook calling a timer's reset() delivers that window at once, inside its own."""
    cap = capture(snapshot_file=tmp_path / "s.jsonl", trace_every=0)
    cap.lt._in_order.wait_s = 600.0  # waiting for itself would hang the thread, not time out
    train = cap.lt.timer("train")
    inner: list[Snapshot] = []

    def reset_the_timer(snapshot: Snapshot) -> None:
        if snapshot.subtree == "root":
            inner.append(train.reset())

    cap.lt.on_reset(reset_the_timer)
    train.record("step")
    cap.clock.advance(1.0)
    closing = threading.Thread(target=cap.lt.reset, daemon=True)
    closing.start()
    closing.join(timeout=60)
    assert not closing.is_alive()
    assert [snapshot.subtree for snapshot in inner] == ["root.train"]
    cap.lt.shutdown()
