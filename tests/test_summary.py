"""`looptrace summary`: whole tables from span, snapshot and flat metrics files."""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from looptrace import RankInfo, Section, SectionStats, Snapshot, configure
from looptrace._cli import main
from looptrace._offline.reader import open_inputs
from looptrace._offline.sampled import SAMPLED
from looptrace._offline.span_records import load_spans
from looptrace._offline.summary import merge_windows, summarize_spans, summarize_windows
from looptrace._offline.window_records import Window, load_windows
from looptrace.testing import FakeClock, capture

from .helpers.examples import examples
from .helpers.runs import Run, record_run

RANK_NOTE = "rank min / rank max: lowest and highest per-rank mean; slowest: the rank of the max"


@pytest.fixture
def two_ranks(tmp_path: Path) -> list[Run]:
    """Two ranks, four steps each; rank 1 has a slow last data load and a faster forward."""
    return [
        record_run(tmp_path, rank=0, world_size=2, data_ms=(10, 20, 30, 40), forward_ms=50),
        record_run(tmp_path, rank=1, world_size=2, data_ms=(15, 25, 35, 85), forward_ms=40),
    ]


def _summary(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    assert main(["summary", *map(str, args)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def _sampled(run: Run) -> str:
    """Return the note under a span-file summary, naming the snapshot file beside it."""
    beside = sorted(run.span_file.parent.glob("snapshots*.jsonl"))[0]
    return f"{SAMPLED}; every step: looptrace summary {beside}"


def test_span_files_of_two_ranks(two_ranks: list[Run], capsys: pytest.CaptureFixture[str]) -> None:
    """Exact statistics over both ranks, with per-rank min/max of the mean and the slowest."""
    out = _summary(capsys, *(run.span_file for run in two_ranks))
    assert out == "\n".join(
        [
            "span files: 24 spans of 4 traced steps, 2 ranks (0, 1), steps 0-3",
            "",
            "section        count     mean    p50     p99   total  % parent    self  rank min  rank max  slowest",  # noqa: E501
            "root.training      8  77.5 ms  70 ms  125 ms  620 ms              0 ns     75 ms     80 ms        1",  # noqa: E501
            "  forward          8    45 ms  40 ms   50 ms  360 ms      58.1  360 ms     40 ms     50 ms        0",  # noqa: E501
            "  data             8  32.5 ms  25 ms   85 ms  260 ms      41.9  260 ms     25 ms     40 ms        1",  # noqa: E501
            "",
            RANK_NOTE,
            "",
            _sampled(two_ranks[0]),
            "",
        ]
    )


def test_rank_and_step_filters(two_ranks: list[Run], capsys: pytest.CaptureFixture[str]) -> None:
    """--rank keeps one rank (no cross-rank columns); --since-step drops earlier steps."""
    files = [run.span_file for run in two_ranks]
    assert _summary(capsys, *files, "--rank", "1", "--since-step", "2") == "\n".join(
        [
            "span files: 6 spans of 2 traced steps, rank 1, steps 2-3",
            "",
            "section        count    mean    p50     p99   total  % parent    self",
            "root.training      2  100 ms  75 ms  125 ms  200 ms              0 ns",
            "  data             2   60 ms  35 ms   85 ms  120 ms      60.0  120 ms",
            "  forward          2   40 ms  40 ms   40 ms   80 ms      40.0   80 ms",
            "",
            _sampled(two_ranks[0]),
            "",
        ]
    )


def test_snapshot_files_merge_windows(
    two_ranks: list[Run], capsys: pytest.CaptureFixture[str]
) -> None:
    """Windows merge exactly for counts and totals; quantiles are estimated and say so."""
    out = _summary(capsys, *(run.snapshot_file for run in two_ranks))
    # The host's memory, this process's own: its line is checked apart from the rest.
    memory = re.search(r"\n\nmemory: host peak resident [0-9.]+ [KMG]iB\n", out)
    assert memory is not None
    out = out.replace(memory.group(0), "\n", 1)
    assert out == "\n".join(
        [
            "findings (1 of 1, most severe first):",
            "  critical input_bound: 60% of the root.training lap waits for input in "
            "root.training.data (0.120 s of 0.200 s) (4 of 4 windows); try: more DataLoader "
            "workers, pin_memory, prefetching, or lighter transforms",
            "",
            "snapshot files: 4 windows, 2 ranks (0, 1), steps 0-3",
            "",
            "section        count     mean    p50     p99   total  % parent    self  rank min  rank max  slowest",  # noqa: E501
            "root.training      8  77.5 ms  70 ms  125 ms  620 ms              0 ns     75 ms     80 ms        1",  # noqa: E501
            "  forward          8    45 ms  40 ms   50 ms  360 ms      58.1  360 ms     40 ms     50 ms        0",  # noqa: E501
            "  data             8  32.5 ms  25 ms   85 ms  260 ms      41.9  260 ms     25 ms     40 ms        1",  # noqa: E501
            "",
            RANK_NOTE,
            "p50 and p99 of several windows are estimated from each window's min, p50, p90, p99 "
            "and max",
            "",
        ]
    )


def test_one_window_is_reported_as_the_snapshot_itself() -> None:
    """Merging a single window changes nothing: the summary is the snapshot's statistics."""
    cap = capture()
    train = cap.lt.timer("training")
    for seconds in (0.1, 0.3, 0.2):
        train.record("forward")
        cap.clock.advance(seconds)
        train.record()
    snap = cap.lt.reset()
    merged = merge_windows([Window(rank=0, step=3, host=None, stats=dict(snap))])
    assert {p: s.to_dict() for p, s in merged.items()} == snap.to_dict()


def test_merged_windows_are_exact_where_they_can_be() -> None:
    """count, total, mean, min, max, std, self time and buckets of two windows are exact."""

    def stats(values: list[float]) -> SectionStats:
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        ordered = sorted(values)
        pick = lambda q: ordered[max(math.ceil(q * len(values)) - 1, 0)]  # noqa: E731
        return SectionStats(
            len(values), sum(values), mean, min(values), max(values), std,
            pick(0.5), pick(0.9), pick(0.99), sum(values) / 2, 0, (len(values), 0),
        )  # fmt: skip

    first, second = [1.0, 2.0, 3.0, 4.0], [10.0, 20.0]
    merged = merge_windows(
        [Window(0, 4, None, {"p": stats(first)}), Window(0, 6, None, {"p": stats(second)})]
    )["p"]
    whole = stats(first + second)
    assert {
        "count": merged.count,
        "total": merged.total,
        "mean": merged.mean,
        "min": merged.min,
        "max": merged.max,
        "std": round(merged.std, 12),
        "self_time": merged.self_time,
        "buckets": merged.buckets,
    } == {
        "count": whole.count,
        "total": whole.total,
        "mean": whole.mean,
        "min": whole.min,
        "max": whole.max,
        "std": round(whole.std, 12),
        "self_time": whole.self_time,
        "buckets": (6, 0),
    }
    assert first[0] <= merged.p50 <= second[-1]


def test_flat_metrics_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A JSON-lines file of `timing.<path>.<stat>` keys (plus other metrics) is summarized."""
    cap = capture()
    train = cap.lt.timer("training")
    lines = []
    for step in range(1, 5):
        train.record("forward")
        cap.clock.advance(0.1 * step)
        train.record()
        if step % 2 == 0:
            metrics = cap.lt.reset().as_metrics(prefix="timing")
            lines.append(json.dumps({"step": step, "loss": 1.0 / step, **metrics}))
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert _summary(capsys, tmp_path / "metrics.jsonl") == "\n".join(
        [
            "metrics files: 2 windows, rank 0, closed at steps 2-4",
            "",
            "section        count    mean     p50     p99  total  % parent  self",
            "root.training      4  250 ms  200 ms  400 ms    1 s            0 ns",
            "  forward          4  250 ms  200 ms  400 ms    1 s     100.0   1 s",
            "",
            "p50 and p99 of several windows are estimated from each window's min, p50, p90, p99 "
            "and max",
            "",
        ]
    )


def test_since_step_on_snapshot_files_keeps_later_windows(
    two_ranks: list[Run], capsys: pytest.CaptureFixture[str]
) -> None:
    """--since-step keeps the windows that closed at that step or later."""
    out = _summary(capsys, *(run.snapshot_file for run in two_ranks), "--since-step", "3")
    out = out.split("\n\n", 1)[1]  # after the findings (the run is input-bound)
    assert out.splitlines()[0] == "snapshot files: 2 windows, 2 ranks (0, 1), steps 2-3"
    counts = {line.split()[0]: line.split()[1] for line in out.splitlines()[3:6]}
    assert counts == {"root.training": "4", "forward": "4", "data": "4"}


def test_cross_rank_snapshot_lines_give_the_straggler_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One rank's reset(across_ranks=True) lines show rank min/max and the slowest rank."""
    from looptrace import RankInfo, RankSpread, SectionSpread, Snapshot
    from looptrace._export.files import SnapshotFileWriter

    def spread(low: float, high: float, slowest: int) -> SectionSpread:
        one = RankSpread(min=low, max=high, mean=(low + high) / 2, slowest_rank=slowest)
        nan = RankSpread(min=math.nan, max=math.nan, mean=math.nan, slowest_rank=None)
        return SectionSpread(
            ranks=4, absent=(), count=one, total=one, mean=one, p99=nan, max=one, self_time=one
        )

    stats = SectionStats(
        count=2,
        total=0.2,
        mean=0.1,
        min=0.1,
        max=0.1,
        std=0.0,
        p50=0.1,
        p90=0.1,
        p99=0.1,
        self_time=0.2,
        errors=0,
        buckets=(0,) * 23,
    )
    path = tmp_path / "snapshots.jsonl"
    writer = SnapshotFileWriter(path, RankInfo(rank=0, world_size=4))
    for slowest, high in ((3, 0.3), (3, 0.25), (1, 0.5)):
        writer(
            Snapshot(
                {"root.fwd": stats},
                start_ns=0,
                end_ns=1,
                rank=0,
                across_ranks={"root.fwd": spread(0.1, high, slowest)},
            )
        )
    writer.close()
    line = json.loads(path.read_text().splitlines()[0])
    assert line["across_ranks"]["root.fwd"]["p99"] == {
        "min": None,
        "max": None,
        "mean": None,
        "slowest_rank": None,
        "fastest_rank": None,
    }
    out = _summary(capsys, path).splitlines()
    assert out[2:4] == [
        "section   count    mean     p50     p99   total  % parent    self  rank min  rank max  slowest",  # noqa: E501
        "root.fwd      6  100 ms  100 ms  100 ms  600 ms            600 ms    100 ms    500 ms        3",  # noqa: E501
    ]
    assert out[5].startswith("rank min / rank max: lowest and highest per-rank mean in any window")


HOSTILE_NAMES = {
    "red\x1b[31m": "red\\x1b[31m",
    "over\rwrite": "over\\rwrite",
    "nul\x00": "nul\\x00",
    "evil\u202etxt.exe": "evil\\u202etxt.exe",
    "two\nlines": "two\\nlines",
    "back\\slash": "back\\\\slash",
    "bell\x07\x9b": "bell\\x07\\x9b",
}


def test_names_from_files_are_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Escape sequences, CR, NUL, bidi overrides and newlines in names reach no terminal raw."""
    section = {"count": 1, "total": 0.1, "mean": 0.1, "min": 0.1, "max": 0.1, "buckets": []}
    stats = {"root.t": section} | {f"root.t.{name}": section for name in HOSTILE_NAMES}
    record = {"kind": "looptrace.snapshot", "version": 1, "step": 3, "rank": 0}
    record |= {"subtree": "root.t\x1b]0;title\x07", "stats": stats}
    snapshots = tmp_path / "snapshots.jsonl"
    snapshots.write_text(json.dumps(record) + "\n")
    out = _summary(capsys, snapshots)
    assert all(c.isprintable() for c in out.replace("\n", "")), ascii(out)
    lines = out.splitlines()
    assert lines[0] == (
        "snapshot files: 1 window (1 of root.t\\x1b]0;title\\x07), rank 0, closed at step 3"
    )
    rows = [line.strip().split("  ")[0] for line in lines[3 : 3 + len(stats)]]
    assert sorted(rows[1:]) == sorted(HOSTILE_NAMES.values())
    assert len(lines) == 3 + len(stats)


def test_units_from_files_are_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A timer path and unit with control characters reach the throughput lines escaped."""
    section = {"count": 1, "total": 0.5, "mean": 0.5, "min": 0.5, "max": 0.5, "buckets": []}
    path, unit = "root.t\x1b[31m", "tok\nens"
    rate = {"total": 10, "per_s": 10, "per_lap_s": 20, "per_lap": 10}
    spread = {"ranks": 2, "total": 10, "per_s": 10, "min": 4, "max": 6, "mean": 5}
    record = {"kind": "looptrace.snapshot", "version": 1, "step": 3, "rank": 0}
    record |= {"start_ns": 0, "end_ns": 1_000_000_000, "stats": {path: section}}
    record |= {"rates": {path: {unit: rate}}}
    record |= {
        "rates_across_ranks": {path: {unit: {**spread, "slowest_rank": 1, "fastest_rank": 0}}}
    }
    snapshots = tmp_path / "snapshots.jsonl"
    snapshots.write_text(json.dumps(record) + "\n")
    out = _summary(capsys, snapshots)
    assert all(c.isprintable() for c in out.replace("\n", "")), ascii(out)
    assert out.splitlines()[5:7] == [
        "throughput root.t\\x1b[31m tok\\nens: 10 in all, 10/s of wall time, 20/s of lap time",
        "throughput root.t\\x1b[31m tok\\nens across ranks: job 10 tok\\nens/s (2 ranks); "
        "slowest rank 1 at 4/s, fastest rank 0 at 6/s",
    ]


NAMES = ("data", "forward", "backward")
lap_operations = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.sampled_from((None, *NAMES))),
        st.tuples(st.just("enter"), st.sampled_from(NAMES)),
        st.tuples(st.just("exit"), st.none()),
        st.tuples(st.just("stop"), st.none()),
        st.tuples(st.just("advance"), st.integers(1, 500_000)),
        st.tuples(st.just("reset"), st.none()),
    ),
    max_size=40,
)


def _sums(windows: list[Snapshot]) -> dict[str, tuple[int, float, float, float]]:
    """Return per path: count, total, self time and mean of the ended intervals, summed."""
    sums: dict[str, list[float]] = {}
    for window in windows:
        for path, stats in window.items():
            entry = sums.setdefault(path, [0, 0.0, 0.0, 0.0])
            entry[0] += stats.count
            entry[1] += stats.total
            entry[2] += stats.self_time
            entry[3] += stats.count * stats.mean if stats.count else 0.0
    return {
        path: (int(n), round(total, 9), round(own, 9), round(weighted / n, 9) if n else math.nan)
        for path, (n, total, own, weighted) in sums.items()
    }


def _as_sums(stats: Mapping[str, SectionStats]) -> dict[str, tuple[int, float, float, float]]:
    return {
        path: (s.count, round(s.total, 9), round(s.self_time, 9), round(s.mean, 9))
        for path, s in stats.items()
    }


def _nan_equal(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    return repr(sorted(a.items())) == repr(sorted(b.items()))  # NaN == NaN as text


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lap_operations)
# A never-lapped timer's section, lapped by `record` of its own name: each lap is a span.
@example(
    [
        ("enter", "data"),
        ("advance", 1000),
        ("record", "data"),
        ("advance", 1000),
        ("record", "data"),
        ("advance", 1000),
        ("exit", None),
    ]
)
def test_the_summary_of_the_files_is_the_sum_of_the_windows(ops: list[tuple[str, Any]]) -> None:
    """Any laps, sections and resets: the files' summaries equal the in-memory windows summed."""
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        clock = FakeClock(start_s=0.0)
        lt = configure(
            clock=clock,
            trace_every=1,
            trace_file=folder / "spans.jsonl",
            snapshot_file=folder / "snapshots.jsonl",
        )
        train = lt.timer("training")
        entered: list[Section] = []
        windows: list[Snapshot] = []
        for op, arg in ops:
            if op == "record":
                train.record(arg)
            elif op == "enter":
                entered.append(train.section(arg))
                entered[-1].start()
            elif op == "exit" and entered:
                entered.pop().stop()
            elif op == "stop" and train.running:
                train.stop()
            elif op == "advance":
                clock.advance(arg / 1e6)
            elif op == "reset":
                windows.append(lt.reset())
        while entered:
            entered.pop().stop()
        if train.running:
            train.stop()
        windows.append(lt.reset())
        lt.shutdown()
        expected = _sums(windows)
        if not any(n for n, *_ in expected.values()):
            return  # nothing ended: no span, and no window line but those of running time
        quiet: list[str] = []
        _, snapshot_files = open_inputs([str(folder / "snapshots.jsonl")], quiet.append)
        from_snapshots = summarize_windows(load_windows("snapshot", snapshot_files, quiet.append))
        assert _nan_equal(_as_sums(from_snapshots.combined), expected)
        _, span_files = open_inputs([str(folder / "spans.jsonl")], quiet.append)
        from_spans = summarize_spans(load_spans(span_files, quiet.append))
        ended = {path: sums for path, sums in expected.items() if sums[0]}
        assert _nan_equal(_as_sums(from_spans.combined), ended)
        assert quiet == []


def test_a_section_cut_by_many_resets_keeps_its_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 500 ms `data` cut by 50 resets: count 1, mean and total 500 ms, 98 % of its parent."""
    clock = FakeClock(start_s=0.0)
    lt = configure(clock=clock, snapshot_file=tmp_path / "snapshots.jsonl")
    train = lt.timer("training")
    train.record("data")
    for _ in range(50):
        clock.advance(0.010)
        lt.reset()
    train.record("forward")
    clock.advance(0.010)
    train.stop()
    lt.shutdown()
    table = _summary(capsys, tmp_path / "snapshots.jsonl").splitlines()[2:5]
    assert [line.split() for line in table] == [
        ["section", "count", "mean", "p50", "p99", "total", "%", "parent", "self"],
        ["root.training", "1", "510", "ms", "510", "ms", "510", "ms", "510", "ms", "0", "ns"],
        ["data", "1", "500", "ms", "500", "ms", "500", "ms", "500", "ms", "98.0", "500", "ms"],
    ]


def test_another_ranks_laps_are_not_children_of_rank_0s(tmp_path: Path) -> None:
    """With a run id every rank's lap names rank 0's as its parent: self time stays per rank."""
    for rank in (0, 1):
        clock = FakeClock(start_s=0.0)
        lt = configure(
            clock=clock,
            trace_every=1,
            run_id="run-1",
            rank=RankInfo(rank=rank, world_size=2),
            trace_file=tmp_path / "spans.jsonl",
        )
        train = lt.timer("training")
        train.record()
        for _ in range(2):
            with train.section("forward"):
                clock.advance(0.1)
            clock.advance(0.5)  # outside any section: the lap's self time
            train.record()
        train.stop()
        lt.shutdown()
    warnings: list[str] = []
    _, files = open_inputs([str(p) for p in sorted(tmp_path.glob("spans*.jsonl"))], warnings.append)
    summary = summarize_spans(load_spans(files, warnings.append))
    assert warnings == []
    assert summary.combined["root.training"].self_time == pytest.approx(2.0)
    assert {rank: paths["root.training"].self_time for rank, paths in summary.per_rank.items()} == {
        0: pytest.approx(1.0),
        1: pytest.approx(1.0),
    }


def test_a_span_file_summary_says_it_holds_traced_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The summary of spans names the traced steps and the sampling; alone, no file beside."""
    run = record_run(tmp_path, data_ms=[10] * 20)
    alone = tmp_path / "alone"
    alone.mkdir()
    span_file = alone / "spans.jsonl"
    span_file.write_bytes(run.span_file.read_bytes())
    out = _summary(capsys, span_file).splitlines()
    assert out[0] == "span files: 60 spans of 20 traced steps, rank 0, steps 0-19"
    assert out[-1] == SAMPLED
    out = _summary(capsys, run.span_file).splitlines()
    assert out[-1] == f"{SAMPLED}; every step: looptrace summary {tmp_path / 'snapshots.jsonl'}"
