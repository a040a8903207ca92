"""Aggregation: statistics per path, bucket counts, the path cap."""

from __future__ import annotations

import itertools
import logging
import math
import statistics
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace._stats.aggregator import ENTRY_ITEMS, FOLD_AT, KEEP_RAW, MAX_UNGROUPED, Aggregator
from looptrace._stats.buckets import BOUNDARIES_NS, BOUNDARIES_S
from looptrace._stats.snapshot import SectionStats
from looptrace.testing import FakeClock, capture

from .helpers.examples import examples


def _snapshot(aggregator: Aggregator) -> dict[str, dict[str, object]]:
    return aggregator.snapshot(start_ns=0, end_ns=1, rank=0).to_dict()


def test_statistics_of_known_durations() -> None:
    """count, total, mean, min, max, population std and self time match the inputs exactly."""
    aggregator = Aggregator()
    durations_ms = [40, 10, 1000, 30]
    with aggregator.lock:
        aggregator.merge("a", [ms * 1_000_000 for ms in durations_ms], 540_000_000, 1)
        aggregator.merge("a", [20_000_000], 10_000_000, 0)
        stats = aggregator.snapshot(start_ns=0, end_ns=1, rank=0)["a"]
    durations_ms.append(20)
    seconds = [ms / 1000 for ms in durations_ms]
    assert stats.count == 5
    assert stats.total == pytest.approx(sum(seconds))
    assert stats.mean == pytest.approx(statistics.fmean(seconds))
    assert stats.std == pytest.approx(statistics.pstdev(seconds))
    assert (stats.min, stats.max, stats.errors) == (0.01, 1.0, 1)
    assert stats.self_time == pytest.approx(sum(seconds) / 2)
    assert stats.p50 == pytest.approx(0.03, rel=0.01)
    # Nearest rank: the p99 of five values is the largest.
    assert stats.p99 == pytest.approx(1.0, rel=0.01)


def test_bucket_counts_follow_prometheus_le() -> None:
    """A duration equal to a boundary lands in that boundary's bucket (value <= le)."""
    aggregator = Aggregator()
    durations = [round(s * 1e9) for s in (0.4, 0.000001, 2000.0, 0.0000005, 0.000001001)]
    aggregator.merge("a", durations, 0, 0)
    buckets = aggregator.snapshot(start_ns=0, end_ns=1, rank=0)["a"].buckets
    expected = [0] * (len(BOUNDARIES_S) + 1)
    expected[0] = 2  # 0.5 µs and exactly 1 µs
    expected[1] = 1  # just above 1 µs
    expected[BOUNDARIES_S.index(0.4)] = 1
    expected[-1] = 1  # beyond 1000 s
    assert list(buckets) == expected


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.lists(
            st.one_of(st.sampled_from(BOUNDARIES_NS), st.integers(0, 2 * 10**12)),
            min_size=1,
            max_size=80,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_bucket_counts_of_any_batches_match_one_duration_at_a_time(
    batches: list[list[int]],
) -> None:
    """Batches small or large, narrow or wide, on or off boundaries: each duration counted once."""
    aggregator = Aggregator()
    expected = [0] * (len(BOUNDARIES_NS) + 1)
    for batch in batches:
        for duration in batch:
            expected[sum(bound < duration for bound in BOUNDARIES_NS)] += 1
        aggregator.merge("a", list(batch), 0, 0)
    assert list(aggregator.snapshot(start_ns=0, end_ns=1, rank=0)["a"].buckets) == expected


def test_a_window_of_fewer_durations_than_are_kept_unfolded_has_exact_quantiles() -> None:
    """Under KEEP_RAW durations in a window: p50/p90/p99 are the nearest-rank values, exactly."""
    aggregator = Aggregator()
    durations = [ms * 1_000_000 + 123 for ms in range(100, 0, -1)]  # 1..100 ms, unsorted
    aggregator.merge("a", durations[:40], 0, 0)
    aggregator.merge("a", durations[40:], 0, 0)
    stats = aggregator.snapshot(start_ns=0, end_ns=1, rank=0)["a"]
    assert (stats.p50, stats.p90, stats.p99) == (0.050000123, 0.090000123, 0.099000123)
    assert (stats.min, stats.max, stats.count) == (0.001000123, 0.100000123, 100)


def test_a_window_of_more_durations_than_are_kept_unfolded_reads_the_sketch() -> None:
    """Past KEEP_RAW durations the quantiles come from the sketch, within 1 % of the exact."""
    aggregator = Aggregator()
    durations = [(i % 1000 + 1) * 1_000_003 for i in range(3 * KEEP_RAW)]
    aggregator.merge("a", durations, 0, 0)
    stats = aggregator.snapshot(start_ns=0, end_ns=1, rank=0)["a"]
    ordered = sorted(durations)
    for q, value in ((0.5, stats.p50), (0.9, stats.p90), (0.99, stats.p99)):
        exact = ordered[math.ceil(q * len(ordered)) - 1] / 1e9
        assert value != exact
        assert value == pytest.approx(exact, rel=0.01)


def test_a_paths_statistics_read_twice_are_the_same() -> None:
    """Computing a path's statistics changes nothing a second computation would see."""
    aggregator = Aggregator()
    aggregator.merge("a", [30, 10, 20], 5, 1)
    aggregator.merge("b", [7] * (KEEP_RAW + 5), 0, 0)
    with aggregator.lock:
        paths = aggregator._paths
        for agg in paths.values():
            assert agg.stats() == agg.stats()


def test_boundaries_are_log_spaced_seconds_from_1us_to_1000s() -> None:
    """The explicit boundaries are seconds, five per decade (1, 1.6, 2.5, 4, 6.3), 1 µs-1000 s."""
    assert (BOUNDARIES_S[:6], BOUNDARIES_S[-1], len(BOUNDARIES_S)) == (
        (1e-06, 1.6e-06, 2.5e-06, 4e-06, 6.3e-06, 1e-05),
        1000.0,
        46,
    )
    ratios = {round(b / a, 2) for a, b in itertools.pairwise(BOUNDARIES_S)}
    assert ratios == {1.56, 1.57, 1.59, 1.6}


def test_path_cap_folds_overflow_into_other_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past max_paths, new paths count under their parent's "other", with a single warning.

    Paths are admitted in the order they are first merged; a thread merges its timers in
    the order it first used them.
    """
    cap = capture(max_paths=3, trace_every=0)
    train = cap.lt.timer("t")
    with caplog.at_level(logging.WARNING, logger="looptrace"):
        for i in range(10):
            train.record(f"step{i}")
            cap.clock.advance(0.001)
        train.stop()
        snap = cap.lt.reset()
    assert {p: s.count for p, s in snap.items()} == {
        "root.t": 1,
        "root.t.step0": 1,
        "root.t.step1": 1,
        "root.t.other": 8,
    }
    assert len(caplog.records) == 1
    assert "more than 3 distinct section paths" in caplog.records[0].getMessage()
    assert cap.lt.health().overflowed == 8


def test_empty_window_statistics_absent() -> None:
    """An aggregator with nothing folded gives an empty snapshot."""
    assert _snapshot(Aggregator()) == {}


def test_pending_measurements_merge_early_to_bound_memory() -> None:
    """A thread merges its measurements once it holds FOLD_AT, rather than keeping all."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("t")
    for _ in range(20_000):
        train.record("x")
    train.stop()
    state = cap.lt._engine.state()
    assert len(state.log) < FOLD_AT * ENTRY_ITEMS
    assert cap.lt.reset()["root.t.x"].count == 20_000


def test_invalid_max_paths() -> None:
    """max_paths below 1 is rejected with the setting named."""
    with pytest.raises(ValueError, match="max_paths must be at least 1"):
        Aggregator(max_paths=0)


def test_nan_statistics_are_left_out_of_metrics() -> None:
    """as_metrics() never emits NaN values."""
    cap = capture()
    cap.lt.timer("t").record()
    cap.clock.advance(1.0)
    flat = cap.lt.reset().as_metrics()
    assert all(not math.isnan(v) for v in flat.values())


_READERS = 8


def _race(reader: Callable[[], None]) -> None:
    """Run `reader` in `_READERS` threads at once, switching threads as often as can be."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=reader) for _ in range(_READERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)


def test_a_snapshot_read_from_many_threads_at_once_computes_each_path_once() -> None:
    """Statistics computed on first read are the same whichever threads race to read them."""
    durations = [1_000 + (i * 7919) % 100_000 for i in range(KEEP_RAW - 1)]  # kept unfolded
    aggregator = Aggregator()
    with aggregator.lock:
        aggregator.merge("a", list(durations), 0, 0)
        snapshot = aggregator.snapshot(start_ns=0, end_ns=1, rank=0)
    barrier = threading.Barrier(_READERS)
    read: list[SectionStats] = []

    def reader() -> None:
        barrier.wait()
        read.append(snapshot["a"])

    _race(reader)
    assert len({id(stats) for stats in read}) == 1
    assert (read[0].count, read[0].total) == (len(durations), sum(durations) / 1e9)


def _unread(max_paths: int = 1000) -> tuple[looptrace.Looptrace, FakeClock]:
    """Return a looptrace with no metric or file output: nothing reads its snapshots."""
    clock = FakeClock(start_s=0.0)
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        rank=looptrace.RankInfo(),
        trace_every=0,
        clock=clock,
        max_paths=max_paths,
    )
    return lt, clock


def test_reset_hands_the_threads_log_over_and_the_snapshot_groups_it_when_read() -> None:
    """reset() takes each thread's log whole; reading the snapshot gives exact per-path stats."""
    lt, clock = _unread()
    train = lt.timer("t")
    for _ in range(3):
        train.record("a")
        clock.advance(0.002)
        train.record("b")
        clock.advance(0.003)
    train.record()
    state = lt._engine.state()
    assert len(state.log) == 7 * ENTRY_ITEMS  # six sections and the first lap
    snap = lt.reset()
    assert (state.log, lt._aggregator._paths) == ([], {})
    assert snap._stats == {}  # no work per path at the cut: nothing grouped until read
    assert {path: s.count for path, s in snap.items()} == {
        "root.t": 1,
        "root.t.a": 3,
        "root.t.b": 3,
    }
    assert snap["root.t.a"].total == pytest.approx(0.006)
    assert snap["root.t"].self_time == pytest.approx(0.0)
    assert snap["root.t.b"].p50 == pytest.approx(0.003, rel=0.01)
    lt.shutdown()


def test_an_unread_snapshot_copied_with_cross_rank_data_counts_each_section_once() -> None:
    """with_spreads() on a snapshot nobody read yet: the copy and the original agree."""
    lt, clock = _unread()
    train = lt.timer("t")
    for _ in range(4):
        train.record("a")
        clock.advance(0.001)
    train.stop()
    snap = lt.reset()
    copy = snap.with_spreads({})
    assert copy["root.t.a"].count == snap["root.t.a"].count == 4
    assert dict(copy.items()) == dict(snap.items())
    lt.shutdown()


def test_an_unread_snapshot_read_from_many_threads_at_once_groups_its_log_once() -> None:
    """Threads racing to read a snapshot first all see each section counted once."""
    lt, clock = _unread()
    train = lt.timer("t")
    for _ in range(KEEP_RAW + 5):
        train.record("a")
        clock.advance(0.001)
    train.stop()
    snap = lt.reset()
    barrier = threading.Barrier(_READERS)
    read: list[int] = []

    def reader() -> None:
        barrier.wait()
        read.append(len(snap))
        read.append(snap["root.t.a"].count)

    _race(reader)
    assert sorted(set(read)) == [2, KEEP_RAW + 5]
    lt.shutdown()


def test_sections_past_the_path_cap_are_counted_at_reset_before_anyone_reads() -> None:
    """health().overflowed counts a window's "other" sections as reset() returns."""
    lt, clock = _unread(max_paths=3)
    train = lt.timer("t")
    for i in range(10):
        train.record(f"step{i}")
        clock.advance(0.001)
    train.stop()
    snap = lt.reset()
    assert lt.health().overflowed == 8
    assert snap["root.t.other"].count == 8
    lt.shutdown()


def test_logs_of_threads_that_exit_between_resets_are_grouped_to_bound_memory() -> None:
    """Threads that come and go leave a bounded ungrouped log; every section still counts."""
    lt, clock = _unread()
    train = lt.timer("t")

    def work() -> None:
        for _ in range(1_000):
            train.record("a")
            clock.advance(0.001)
        train.stop()

    for _ in range(50):  # each new thread's first call closes the ones that exited before it
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    aggregator = lt._aggregator
    assert sum(len(log) for log, _ in aggregator._logs) <= MAX_UNGROUPED + FOLD_AT * ENTRY_ITEMS
    assert lt.reset()["root.t.a"].count == 50_000
    lt.shutdown()


def test_the_overflow_is_the_parents_other_in_the_summary_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past the cap, names count under their parent's `other`, shown in the tree under it."""
    from looptrace._cli import main

    cap = capture(max_paths=3, trace_every=0, snapshot_file=tmp_path / "s.jsonl")
    train = cap.lt.timer("t")
    for i in range(10):
        train.record(f"step{i}")
        cap.clock.advance(0.001)
    inner = train.timer("late").timer("inner")  # a child of a timer past the cap
    with inner.section("deep"):
        cap.clock.advance(0.001)
    train.stop()
    snap = cap.lt.reset()
    cap.lt.shutdown()
    assert {p: s.count for p, s in snap.items()} == {
        "root.t": 1,
        "root.t.step0": 1,
        "root.t.step1": 1,
        "root.t.other": 8,
        "root.t.other.other": 1,
        "root.t.other.other.other": 1,
    }
    assert main(["summary", str(tmp_path / "s.jsonl")]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("section "))
    table = list(itertools.takewhile(bool, lines[header + 1 :]))
    shown = [(len(line) - len(line.lstrip()), line.split()[0]) for line in table]
    assert shown == [
        (0, "root.t"),
        (2, "other"),
        (4, "other"),
        (6, "other"),
        (2, "step0"),
        (2, "step1"),
    ]
