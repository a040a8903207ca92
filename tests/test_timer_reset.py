"""`Timer.reset()`: a window for one timer's subtree, beside the other timers' windows."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace import Snapshot
from looptrace._cli import main
from looptrace._offline.summary import ESTIMATE_NOTE
from looptrace.testing import Capture, FakeClock, capture

from .helpers.metrics import configured, histogram_of, points_of
from .helpers.ports import free_port
from .helpers.prometheus import le_of, openmetrics_scrape
from .helpers.timing import Worker, counts, totals


def _within(path: str, subtree: str) -> bool:
    return path == subtree or path.startswith(f"{subtree}.")


def test_timer_reset_closes_only_its_subtree(cap: Capture) -> None:
    """training.reset() splits training's running sections and leaves inference's window on."""
    train, infer = cap.lt.timer("training"), cap.lt.timer("inference")
    infer.record("predict")
    cap.clock.advance(1.0)
    train.record("forward")
    cap.clock.advance(2.0)
    first = train.reset()
    t0 = first.start_ns
    assert (first.subtree, first.end_ns - t0) == ("root.training", 3_000_000_000)
    assert totals(first) == {"root.training": 2.0, "root.training.forward": 2.0}
    assert counts(first) == {"root.training": 0, "root.training.forward": 0}
    cap.clock.advance(4.0)
    train.stop()
    infer.stop()
    whole = cap.lt.reset()
    assert (whole.subtree, whole.start_ns - t0, whole.end_ns - t0) == ("root", 0, 7_000_000_000)
    assert totals(whole) == {
        "root.inference": 7.0,
        "root.inference.predict": 7.0,
        "root.training": 4.0,
        "root.training.forward": 4.0,
    }
    assert counts(whole) == {
        "root.inference": 1,
        "root.inference.predict": 1,
        "root.training": 1,
        "root.training.forward": 1,
    }
    assert counts(train.reset()) == {}


def test_subtree_window_starts_at_its_own_or_an_enclosing_reset(cap: Capture) -> None:
    """A subtree's window starts at its last reset, or a later lt.reset(); step counts its laps."""
    train, infer = cap.lt.timer("training"), cap.lt.timer("inference")
    for _ in range(3):
        train.record()
        cap.clock.advance(1.0)
    first = train.reset()
    t0 = first.start_ns
    assert (first.end_ns - t0, first.step) == (3_000_000_000, 2)
    infer.record()
    cap.clock.advance(1.0)
    infer.record()
    assert infer.reset().step == 1
    cap.clock.advance(1.0)
    second = train.reset()
    assert (second.start_ns - t0, second.end_ns - t0) == (3_000_000_000, 5_000_000_000)
    cap.lt.reset()
    cap.clock.advance(1.0)
    assert infer.reset().start_ns - t0 == 5_000_000_000
    assert cap.lt.root.reset().subtree == "root"


def test_two_timers_reset_at_different_rates_conserve_totals() -> None:
    """Training reset every 3 steps, inference every 7, all every 20: sums per path are exact."""
    cap = capture(trace_every=0)
    clock = cap.clock
    train, infer = cap.lt.timer("training"), cap.lt.timer("inference")
    windows: list[Snapshot] = []
    forward = backward = 0.0
    infer_start = None
    train.record()
    for step in range(60):
        train.record("forward")
        clock.advance(0.001 * (1 + step % 3))
        forward += 0.001 * (1 + step % 3)
        train.record("backward")
        clock.advance(0.002)
        backward += 0.002
        if step % 4 == 0:
            infer.record("predict")
            infer_start = clock.monotonic_ns() if infer_start is None else infer_start
            clock.advance(0.003)
            backward += 0.003
        train.record()
        if step % 3 == 2:
            windows.append(train.reset())
        if step % 7 == 6:
            windows.append(infer.reset())
        if step % 20 == 19:
            windows.append(cap.lt.reset())
    train.stop()
    infer.stop()
    windows.append(cap.lt.reset())
    end = clock.monotonic_ns()
    assert infer_start is not None
    summed: Counter[str] = Counter()
    counted: Counter[str] = Counter()
    for window in windows:
        assert all(_within(path, window.subtree) for path in window), window.subtree
        summed.update({path: stats.total for path, stats in window.items()})
        counted.update({path: stats.count for path, stats in window.items()})
    inference = (end - infer_start) / 1e9
    assert {path: round(total, 9) for path, total in summed.items()} == {
        "root.training": round(end / 1e9, 9),
        "root.training.forward": round(forward, 9),
        "root.training.backward": round(backward, 9),
        "root.inference": round(inference, 9),
        "root.inference.predict": round(inference, 9),
    }
    assert dict(counted) == {
        "root.training": 61,
        "root.training.forward": 60,
        "root.training.backward": 60,
        "root.inference": 1,
        "root.inference.predict": 15,
    }
    assert [w.subtree for w in windows].count("root.training") == 20
    assert [w.subtree for w in windows].count("root.inference") == 8


def test_subtree_reset_cuts_sections_running_in_another_thread(cap: Capture) -> None:
    """training.reset() from the main thread splits a worker's running section at the cut."""
    train, infer = cap.lt.timer("training"), cap.lt.timer("inference")
    worker = Worker()
    infer.record("predict")
    worker.run(lambda: train.record("forward"))
    cap.clock.advance(1.0)
    first = train.reset()
    assert totals(first) == {"root.training": 1.0, "root.training.forward": 1.0}
    cap.clock.advance(2.0)
    worker.run(train.stop)
    worker.close()
    infer.stop()
    second = train.reset()
    assert totals(second) == {"root.training": 2.0, "root.training.forward": 2.0}
    assert counts(second) == {"root.training": 1, "root.training.forward": 1}
    assert second["root.training.forward"].max == 3.0
    rest = cap.lt.reset()
    assert totals(rest) == {"root.inference": 3.0, "root.inference.predict": 3.0}


def test_subtree_resets_racing_with_a_recording_thread() -> None:
    """training.reset() racing a recording thread neither loses nor double-counts sections."""
    cap = capture(trace_every=0)
    train, infer = cap.lt.timer("training"), cap.lt.timer("inference")
    done = threading.Event()

    def work() -> None:
        for _ in range(20_000):
            train.record("forward")
            train.record("backward")
        train.stop()
        done.set()

    infer.record()
    thread = threading.Thread(target=work)
    thread.start()
    seen: Counter[str] = Counter()
    while not done.is_set():
        seen.update(counts(train.reset()))
    thread.join()
    seen.update(counts(train.reset()))
    infer.stop()
    assert dict(seen) == {
        "root.training": 1,
        "root.training.forward": 20_000,
        "root.training.backward": 20_000,
    }
    assert counts(cap.lt.reset()) == {"root.inference": 1}


def test_snapshot_file_names_the_subtree_and_summary_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Subtree windows' lines carry `subtree`; lt.reset() lines keep today's fields."""
    path = tmp_path / "s.jsonl"
    cap = capture(snapshot_file=path, trace_every=0)
    train, infer = cap.lt.timer("training"), cap.lt.timer("inference")
    for _ in range(2):
        train.record()
        cap.clock.advance(0.5)
    train.reset()
    infer.record()
    cap.clock.advance(0.25)
    infer.stop()
    infer.reset()
    train.stop()
    cap.lt.reset()
    cap.lt.shutdown()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line.get("subtree"), line["step"], sorted(line["stats"])) for line in lines] == [
        ("root.training", 1, ["root.training"]),
        ("root.inference", 1, ["root.inference"]),
        (None, 2, ["root.training"]),
    ]
    assert main(["summary", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:5] == [
        "snapshot files: 3 windows (1 of root, 1 of root.inference, 1 of root.training), rank 0, "
        "steps 0-1",
        "",
        "section         count    mean     p50     p99   total  % parent    self",
        "root.training       2  625 ms  500 ms  750 ms  1.25 s            1.25 s",
        "root.inference      1  250 ms  250 ms  250 ms  250 ms            250 ms",
    ]
    # the window of every timer carries the process's memory: its line, then the note
    assert out[5:] == ["", out[6], "", ESTIMATE_NOTE]
    assert out[6].startswith("memory: host peak resident ")


def test_subtree_reset_leaves_other_timers_exemplars_for_their_window() -> None:
    """A span of inference that ended before training.reset() is inference's exemplar later."""
    port = free_port()
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=TracerProvider(), clock=clock, prometheus=port)
    train, infer = lt.timer("training"), lt.timer("inference")
    infer.record("predict")
    clock.advance(0.002)
    infer.stop()
    train.record()
    clock.advance(0.001)
    train.reset()
    infer.reset()
    samples = openmetrics_scrape(port)
    lt.shutdown()
    exemplars = {
        (s.labels["looptrace_path"], s.labels["le"])
        for s in samples
        if s.name == "looptrace_section_duration_seconds_bucket" and s.exemplar is not None
    }
    assert exemplars == {
        ("root.inference", le_of(2_000_000)),
        ("root.inference.predict", le_of(2_000_000)),
    }


def test_metrics_flush_adds_each_subtree_window_to_its_paths() -> None:
    """The histogram metric of every path is the sum of its subtree's windows, none twice."""
    reader = InMemoryMetricReader()
    lt, clock = configured(reader)
    train, infer = lt.timer("training"), lt.timer("inference")
    windows: list[Snapshot] = []
    for step in range(12):
        train.record("forward")
        clock.advance(0.001 * (1 + step % 4))
        infer.record("predict")
        clock.advance(0.0005)
        train.record()
        if step % 2:
            windows.append(train.reset())
        if step % 5 == 4:
            windows.append(infer.reset())
    train.stop()
    infer.stop()
    windows.append(lt.reset())
    points = points_of(reader.get_metrics_data())
    lt.shutdown()
    expected = {}
    for path in {p for w in windows for p in w}:
        stats = [w[path] for w in windows if path in w]
        ended = [s for s in stats if s.count]  # min and max are NaN where none ended
        expected[path] = {
            "bounds": Snapshot.boundaries,
            "buckets": tuple(map(sum, zip(*(s.buckets for s in stats), strict=True))),
            "count": sum(s.count for s in stats),
            "sum": round(sum(s.total for s in stats), 9),
            "min": round(min(s.min for s in ended), 9),
            "max": round(max(s.max for s in ended), 9),
        }
    assert {path: histogram_of(p) for path, p in points.items()} == expected
    assert {path: p.count for path, p in points.items()} == {
        "root.training": 13,
        "root.training.forward": 12,
        "root.inference": 1,
        "root.inference.predict": 12,
    }


def test_windows_name_their_first_and_last_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint after the reset in step 99 is in the window of steps 99-149, in every output."""
    path = tmp_path / "s.jsonl"
    cap = capture(snapshot_file=path, trace_every=0)
    train = cap.lt.timer("training")
    snapshots: list[Snapshot] = []
    for step, _ in enumerate(train.iterate(range(200))):
        train.record("forward")
        cap.clock.advance(0.01)
        if step % 50 == 49:
            snapshots.append(cap.lt.reset())  # mid-step: step 49 is split between two windows
        if step == 99:
            with train.section("checkpoint"):
                cap.clock.advance(5.0)
    snapshots.append(cap.lt.reset())  # after the loop: no lap runs
    snapshots.append(cap.lt.reset())  # nothing since
    cap.lt.shutdown()
    assert [(s.step, s.steps, "root.training.checkpoint" in s) for s in snapshots] == [
        (49, range(0, 50), False),
        (99, range(49, 100), False),
        (149, range(99, 150), True),
        (199, range(149, 200), False),
        (200, range(199, 200), False),
        (200, range(200, 200), False),
    ]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["step"], line.get("steps")) for line in lines] == [
        (49, [0, 49]),
        (99, [49, 99]),
        (149, [99, 149]),
        (199, [149, 199]),
        (200, [199, 199]),
    ]
    assert main(["summary", str(path)]) == 0
    # (the checkpoint, by its name, is named first: time outside the steps)
    assert "\nsnapshot files: 5 windows, rank 0, steps 0-199\n" in capsys.readouterr().out
