"""`looptrace summary` of snapshot files folds each window as it is read, in bounded memory."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from looptrace import SectionStats
from looptrace._cli import main
from looptrace._offline.duplicates import IndexRuns
from looptrace._offline.mixture import mixture_quantiles
from looptrace._offline.reader import InputError
from looptrace._offline.snapped_mixture import STEPS_PER_DOUBLING, TOLERANCE
from looptrace._offline.summary import merge_windows, render_summary, select, summarize_windows
from looptrace._offline.summary_fold import SummaryFold, fold_windows
from looptrace._offline.window_fold import KEEP, ExactSum, QuantileFold
from looptrace._offline.window_records import Window

from .helpers.window_stats import section_stats, windows


def _fields(stats: SectionStats) -> list[object]:
    """Return the statistics as a list where NaN equals NaN (`repr` of each float)."""
    values = [getattr(stats, field.name) for field in dataclasses.fields(stats)]
    return [repr(value) if isinstance(value, float) else value for value in values]


def _folded(found: list[Window]) -> SummaryFold:
    fold = SummaryFold()
    for window in found:
        fold.add(window)
    return fold


@given(windows())
def test_the_fold_equals_the_list_merge_up_to_the_bound(found: list[Window]) -> None:
    """Up to KEEP windows a path: the streamed table, per rank and overall, is the list's."""
    streamed = _folded(found).summary()
    listed = summarize_windows(found)
    assert render_summary(streamed) == render_summary(listed)
    assert streamed.description == listed.description
    assert {p: _fields(s) for p, s in streamed.combined.items()} == {
        p: _fields(s) for p, s in listed.combined.items()
    }
    several = len(listed.per_rank) > 1
    for rank, paths in listed.per_rank.items():
        for path, stats in paths.items():
            mine = streamed.per_rank[rank][path]
            if several and mine.count and math.isnan(mine.p50):  # several ranks: no quantiles
                mine = dataclasses.replace(mine, p50=stats.p50, p90=stats.p90, p99=stats.p99)
            assert _fields(mine) == _fields(stats)


@given(st.lists(section_stats(), min_size=KEEP + 1, max_size=3 * KEEP))
def test_past_the_bound_quantiles_are_within_the_stated_tolerance(
    parts: list[SectionStats],
) -> None:
    """Past KEEP windows p50, p90, p99 are within 0.034 % of the exact merge, the rest exact."""
    found = [Window(0, i, None, {"root.a": stats}) for i, stats in enumerate(parts)]
    streamed, exact = _folded(found).summary().combined, merge_windows(found)
    assert _fields(streamed["root.a"])[:6] == _fields(exact["root.a"])[:6]
    assert _fields(streamed["root.a"])[9:] == _fields(exact["root.a"])[9:]
    ended = [stats for stats in parts if stats.count > 0]
    if len(ended) <= KEEP:
        assert _fields(streamed["root.a"]) == _fields(exact["root.a"])
        return
    got = [streamed["root.a"].p50, streamed["root.a"].p90, streamed["root.a"].p99]
    for q, value in zip((0.5, 0.9, 0.99), got, strict=True):
        # where the merged distribution is flat at q, the least value reaching it is either
        # side of the flat part: the tolerance is on a level within 10^-6 of q
        low, high = mixture_quantiles(ended, [max(q - 1e-6, 0.0), min(q + 1e-6, 1.0)])
        assert low / TOLERANCE * (1 - 1e-9) <= value <= high * TOLERANCE * (1 + 1e-9)


def test_memory_does_not_grow_with_the_windows() -> None:
    """A path's quantiles hold at most KEEP windows, then one entry per grid value in range."""
    low, high = 0.01, 0.04  # two doublings: at most 2 * STEPS_PER_DOUBLING + 1 grid values
    bound = 2 * STEPS_PER_DOUBLING + 1
    sizes = []
    for windows_read in (KEEP, 10 * KEEP, 300 * KEEP):
        fold = QuantileFold()
        for index in range(windows_read):
            at = low + (high - low) * ((index * 0.618034) % 1.0)
            fold.add(SectionStats(3, 3 * at, at, low, high, 0.0, at, at, at, 3 * at, 0, ()))
        sizes.append(len(fold))
    assert sizes[0] == KEEP
    assert sizes[1] <= bound
    assert sizes[2] <= bound
    total = ExactSum()
    for index in range(100_000):
        total.add(0.1 * index)
    assert len(total.parts) <= 17
    assert total.value() == math.fsum(0.1 * index for index in range(100_000))


def test_a_files_window_indices_are_kept_as_one_run() -> None:
    """The duplicate check holds one run per writer for a file read in order, not one key each."""
    runs = IndexRuns()
    assert all(runs.add(index) for index in range(10_000))
    assert len(runs) == 1
    assert not runs.add(5_000)


@given(st.lists(st.integers(0, 40), max_size=60))
def test_index_runs_tell_new_numbers_as_a_set_does(numbers: list[int]) -> None:
    """`IndexRuns.add` says new exactly when a set has not seen the number."""
    runs, seen = IndexRuns(), set()
    for number in numbers:
        assert runs.add(number) == (number not in seen)
        seen.add(number)


@given(st.lists(st.floats(min_value=0.0, max_value=1e12) | st.just(math.nan), max_size=80))
def test_an_exact_sum_equals_fsum(values: list[float]) -> None:
    """`ExactSum` gives `math.fsum` of every value added, however they were compressed."""
    total = ExactSum()
    for value in values:
        total.add(value)
    expected = math.fsum(values) if values else math.nan
    assert repr(total.value()) == repr(expected)


@given(windows(), st.lists(st.integers(0, 3), max_size=2), st.none() | st.integers(0, 12))
def test_selections_while_streaming_are_selects(
    found: list[Window], ranks: list[int], since: int | None
) -> None:
    """--rank and --since-step fold the windows `select` keeps, or fail with its message."""
    try:
        kept = select(found, ranks, since)
    except InputError as error:
        with pytest.raises(InputError, match=f"^{re.escape(str(error))}$"):
            fold_windows(found, ranks, since)
        return
    fold = fold_windows(found, ranks, since)
    assert fold is not None
    assert render_summary(fold.summary()) == render_summary(summarize_windows(kept))


def _line(window: int, **extra: Any) -> str:
    stats = {"count": 2, "total": 0.2, "mean": 0.1, "min": 0.05, "max": 0.15, "std": 0.05,
             "p50": 0.1, "p90": 0.14, "p99": 0.15, "self_time": 0.2, "errors": 0,
             "buckets": [1, 1]}  # fmt: skip
    record = {"kind": "looptrace.snapshot", "version": 1, "rank": 0, "step": 10 * window,
              "writer": "w1", "window": window, "stats": {"root.train": stats},
              **extra}  # fmt: skip
    return json.dumps(record)


def test_bad_lines_and_duplicates_are_warned_about_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad lines are warned about per file, a copied file's windows once, and count once."""
    path, copy = tmp_path / "snapshots.jsonl", tmp_path / "copy" / "snapshots.jsonl"
    lines = [_line(0), _line(1, rank="x"), _line(2), "{not json", _line(3)]
    path.write_text("\n".join(lines) + "\n")
    copy.parent.mkdir()
    copy.write_text(path.read_text())
    assert main(["summary", str(path), str(copy)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("snapshot files: 3 windows, rank 0, closed at steps 0-30\n")
    warnings = captured.err.splitlines()
    assert len(warnings) == 5  # each file's two bad lines, then the duplicates once
    assert warnings[-1] == (
        "looptrace summary: warning: 3 duplicate windows (read twice: a file named twice "
        "or copied); counted once"
    )
    assert sum("line 2 is a malformed snapshot record" in line for line in warnings) == 2
