"""The diagnosis of one window on a fake clock: exact findings, abstentions, thresholds, roles."""

from __future__ import annotations

from typing import Any

import pytest

from looptrace import ConfigError, Snapshot, TimerError
from looptrace._diagnosis.diagnosis import Finding, middle_mean
from looptrace._stats.roles import Roles, roles_of
from looptrace._stats.spread import RankSpread, SectionSpread
from looptrace._stats.straggler import (
    RankFigures,
    Straggler,
    StragglerCount,
    StragglerStreaks,
    cause_of,
)
from looptrace._stats.thresholds import DEFAULTS, RECENT_WINDOWS, markdown_table, thresholds
from looptrace.testing import Capture, capture

ABSTAINED = {"abstained": True}
STRAGGLER_ABSTAINS = Finding(
    "straggler",
    "info",
    None,
    None,
    "no cross-rank window: stragglers not looked for",
    "",
    ABSTAINED,
)
NOT_WATCHED = [
    Finding("memory_creep", "info", None, None,
            "no device memory counters in the window: memory creep not watched", "", ABSTAINED),
    Finding("memory_pressure", "info", None, None,
            "no device memory counters in the window: memory pressure not watched", "",
            ABSTAINED),
    Finding("throughput_drop", "info", None, None,
            "no item counts (`count()`) in the window: throughput drop not watched", "",
            ABSTAINED),
    Finding("gpu_idle", "info", None, None,
            "no GPU utilisation sampled in the window: not watched", "", ABSTAINED),
]  # fmt: skip


def train(cap: Capture, steps: int, sections: dict[str, float]) -> Snapshot:
    """Run `steps` laps of `root.train` through `sections` (name: seconds); reset."""
    timer = cap.lt.timer("train")
    for _ in range(steps):
        timer.record()
        for name, seconds in sections.items():
            timer.record(name)
            cap.clock.advance(seconds)
    timer.stop()
    return cap.lt.reset()


def warnings(findings: list[Finding]) -> list[Finding]:
    """Return the findings of severity warning or critical."""
    return [f for f in findings if f.severity != "info"]


def test_a_healthy_window_has_no_warning(cap: Capture) -> None:
    """5 % in data, every lap alike, laps fill the window: only the abstentions, nothing more."""
    snap = train(cap, 10, {"data": 0.005, "forward": 0.060, "backward": 0.035})
    assert snap.diagnosis(min_severity="info") == [STRAGGLER_ABSTAINS, *NOT_WATCHED]


def test_by_default_the_diagnosis_holds_warnings_and_worse_only(cap: Capture) -> None:
    """A healthy window's default diagnosis is empty; its abstentions come on request."""
    snap = train(cap, 10, {"data": 0.005, "forward": 0.060, "backward": 0.035})
    assert snap.diagnosis() == []
    assert snap.diagnosis(min_severity="warning") == []
    assert {f.severity for f in snap.diagnosis(min_severity="info")} == {"info"}


def test_min_severity_critical_leaves_out_warnings(cap: Capture) -> None:
    """`min_severity="critical"` keeps the critical findings only; an unknown name is refused."""
    snap = train(cap, 10, {"data": 0.030, "forward": 0.070})
    assert [f.kind for f in snap.diagnosis(min_severity="critical")] == ["input_bound"]
    with pytest.raises(ValueError, match="min_severity: expected one of critical, warning"):
        snap.diagnosis(min_severity="loud")


def test_an_input_bound_window_is_critical_with_the_data_share(cap: Capture) -> None:
    """30 % of the lap in `data` is critical, named with its share and seconds."""
    snap = train(cap, 10, {"data": 0.030, "forward": 0.070})
    assert warnings(snap.diagnosis()) == [
        Finding(
            "input_bound",
            "critical",
            "root.train.data",
            None,
            "30% of the root.train lap waits for input in root.train.data (0.300 s of 1.000 s)",
            "more DataLoader workers, pin_memory, prefetching, or lighter transforms",
            {"share": pytest.approx(0.3), "data_s": pytest.approx(0.3), "lap_s": 1.0,
             "lap": "root.train"},
        )
    ]  # fmt: skip


def test_input_bound_between_the_levels_is_a_warning(cap: Capture) -> None:
    """15 % in `data` is a warning; with the warning level moved above it, nothing."""
    snap = train(cap, 4, {"data": 0.015, "forward": 0.085})
    assert [(f.kind, f.severity) for f in warnings(snap.diagnosis())] == [
        ("input_bound", "warning")
    ]
    assert warnings(snap.diagnosis(input_bound_warning=0.16)) == []


def test_without_a_data_section_input_wait_is_not_measured(cap: Capture) -> None:
    """A loop with no `data` section abstains, and an unknown name (`loader`) is never guessed."""
    snap = train(cap, 4, {"loader": 0.050, "forward": 0.050})
    findings = snap.diagnosis(min_severity="info")
    assert findings[0] == Finding(
        "input_bound", "info", None, None, "no `data` section: input wait not measured", "",
        ABSTAINED,
    )  # fmt: skip
    assert warnings(findings) == []


def test_roles_name_the_data_section(tmp_path: Any) -> None:
    """`configure(roles={"data": "loader"})` makes `loader` the data section."""
    cap = capture(roles={"data": ["loader"]})
    try:
        snap = train(cap, 4, {"loader": 0.050, "forward": 0.050})
        assert [(f.kind, f.severity, f.path) for f in warnings(snap.diagnosis())] == [
            ("input_bound", "critical", "root.train.loader")
        ]
    finally:
        cap.lt.shutdown()


def test_a_timer_around_the_laps_counts_only_the_time_outside_them(cap: Capture) -> None:
    """A `fit` timer running around 10 laps of 100 ms, 20 ms before them: 2 %, no warning."""
    fit, timer = cap.lt.timer("fit"), cap.lt.timer("train")
    fit.record("setup")
    cap.clock.advance(0.020)
    fit.record()  # the fit's own lap runs on, around the training laps
    for _ in range(10):
        with timer.section("forward"):
            cap.clock.advance(0.100)
    fit.stop()
    snap = cap.lt.reset()
    assert snap["root.fit"].total == pytest.approx(1.02)
    assert [f for f in snap.diagnosis() if f.kind == "outside_laps"] == []


def test_time_outside_the_laps_is_named_with_the_other_timers(cap: Capture) -> None:
    """A third of the window in an `eval` timer between laps: outside_laps, critical, eval named."""
    timer, evaluate = cap.lt.timer("train"), cap.lt.timer("eval")
    for _ in range(4):
        with timer.section("forward"):
            cap.clock.advance(0.100)
        with evaluate.section("batch"):
            cap.clock.advance(0.050)
    snap = cap.lt.reset()
    [outside] = [f for f in snap.diagnosis() if f.kind == "outside_laps"]
    assert outside == Finding(
        "outside_laps",
        "critical",
        "root.train",
        0,
        "33% of the window's 0.600 s goes to other work than root.train's steps "
        "(root.eval 0.200 s)",
        "evaluate or checkpoint less often, or make that work cheaper",
        {
            "share": pytest.approx(1 / 3),
            "wall_s": pytest.approx(0.6),
            "lap_s": pytest.approx(0.4),
            "others": {"root.eval": pytest.approx(0.2)},
        },
    )


def test_a_checkpoint_section_inside_the_steps_counts_as_other_work() -> None:
    """A section given the checkpoint role inside the loop counts; time in no timer does not."""
    cap = capture(roles={"checkpoint": "save"})
    try:
        cap.clock.advance(0.5)  # before any timer ran: counts in the wall time only
        snap = train(cap, 4, {"forward": 0.050, "save": 0.050})
        [found] = [f for f in snap.diagnosis() if f.kind == "outside_laps"]
        assert (found.severity, found.evidence["others"]) == (
            "warning",
            {"root.train.save": pytest.approx(0.2)},
        )
        assert found.evidence["wall_s"] == pytest.approx(0.9)
    finally:
        cap.lt.shutdown()


def test_self_time_of_the_step_is_named(cap: Capture) -> None:
    """A lap whose sections cover 70 % of it: 30 % in no section is critical."""
    timer = cap.lt.timer("train")
    for _ in range(4):
        timer.record()
        with timer.section("forward"):
            cap.clock.advance(0.070)
        cap.clock.advance(0.030)
    timer.stop()
    snap = cap.lt.reset()
    [found] = [f for f in snap.diagnosis() if f.kind == "self_time"]
    assert found.to_dict() == {
        "kind": "self_time",
        "severity": "critical",
        "path": "root.train",
        "rank": 0,
        "message": "30% of root.train's lap time (0.120 s) is in no section",
        "action": "time the untimed part of root.train with a section",
        "evidence": {"share": pytest.approx(0.3), "self_time_s": pytest.approx(0.12),
                     "lap_s": pytest.approx(0.4)},
    }  # fmt: skip


def test_slow_steps_are_counted_with_the_worst(cap: Capture) -> None:
    """One step of 20 in 1 s among 100 ms steps: one slow step (5 %), a warning, the worst."""
    timer = cap.lt.timer("train")
    for step in range(20):
        timer.record()
        with timer.section("forward"):
            cap.clock.advance(1.0 if step == 7 else 0.100)
    timer.stop()
    snap = cap.lt.reset()
    one = snap.diagnosis(warmup_windows=0, slow_steps_windows=1)
    [found] = [f for f in one if f.kind == "slow_steps"]
    assert (found.severity, found.path, found.evidence) == (
        "warning",
        "root.train",
        {"slow": 1, "steps": 20, "median_s": pytest.approx(0.1), "worst_s": pytest.approx(1.0),
         "windows_in_a_row": 1},
    )  # fmt: skip
    assert found.message == (
        "1 of 20 root.train steps took over 3x the median 100 ms; the worst 1 s"
    )


def test_sub_millisecond_noise_is_not_a_slow_step(cap: Capture) -> None:
    """200 µs steps with one of 800 µs (4x, but 0.6 ms over): no slow step; 1.3 ms is one."""
    timer = cap.lt.timer("train")
    for step in range(20):
        timer.record()
        cap.clock.advance(0.0008 if step == 7 else 0.0002)
    timer.stop()
    assert [f.kind for f in cap.lt.reset().diagnosis() if f.kind == "slow_steps"] == []
    for step in range(20):
        timer.record()
        cap.clock.advance(0.0013 if step == 7 else 0.0002)
    timer.stop()
    [found] = [f for f in cap.lt.reset().diagnosis(slow_steps_windows=1) if f.kind == "slow_steps"]
    assert found.message == (
        "1 of 20 root.train steps took over 3x the median 200 µs; the worst 1.3 ms"
    )


def test_a_straggler_is_named_with_its_cause(cap: Capture) -> None:
    """A window carrying a straggler: rank 1, 40 % over, cause forward; then chronic too."""
    snap = train(cap, 2, {"data": 0.005, "forward": 0.095})
    straggler = Straggler(
        rank=1, by="wait", excess_s=0.08, typical_s=0.2, cause="root.train.forward",
        excess_by_path={"root.train.forward": 0.08}, chronic_rank=1, chronic_count=7,
        streak=2,
    )  # fmt: skip
    reduced = snap.with_spreads({}, straggler)
    found = [f for f in reduced.diagnosis() if f.kind in ("straggler", "chronic_straggler")]
    assert [(f.kind, f.severity, f.rank, f.path, f.message) for f in found] == [
        (
            "straggler", "critical", 1, "root.train.forward",
            "rank 1 makes the others wait (least time in wait sections): 0.080 s (40%) over "
            "the typical rank; cause root.train.forward",
        ),
        (
            "chronic_straggler", "critical", 1, None,
            "rank 1 was the straggler in 7 of the last 10 windows",
        ),
    ]  # fmt: skip
    spread = Straggler(1, "wait", 0.08, 0.2, None, ("root.train.a", "root.train.b"), streak=2)
    [found_spread] = [f for f in snap.with_spreads({}, spread).diagnosis() if f.kind == "straggler"]
    assert found_spread.message.endswith(
        "cause spread over several sections: root.train.a, root.train.b"
    )
    assert found_spread.path is None


def test_a_cross_rank_window_without_a_straggler_says_why(cap: Capture) -> None:
    """A reduced window where fewer than two ranks lapped abstains with that reason."""
    snap = train(cap, 2, {"data": 0.005, "forward": 0.095}).with_spreads({})
    [found] = [f for f in snap.diagnosis(min_severity="info") if f.kind == "straggler"]
    assert found == Finding(
        "straggler", "info", None, None,
        "fewer than two ranks ran laps: no straggler to name", "", ABSTAINED,
    )  # fmt: skip


def test_an_empty_window_finds_nothing_alarming() -> None:
    """A window with no path abstains everywhere and warns of nothing."""
    findings = Snapshot({}, start_ns=0, end_ns=0, rank=0).diagnosis(min_severity="info")
    assert {f.severity for f in findings} == {"info"}
    assert all(f.evidence == ABSTAINED for f in findings)


def test_a_small_straggler_excess_is_silent(cap: Capture) -> None:
    """5 % over the typical rank stays below the warning level: no straggler finding."""
    snap = train(cap, 2, {"data": 0.005, "forward": 0.095})
    reduced = snap.with_spreads({}, Straggler(1, "wait", 0.01, 0.2, "root.train.forward"))
    assert warnings(reduced.diagnosis()) == []
    assert [f.kind for f in reduced.diagnosis()].count("straggler") == 0


def test_the_cause_is_the_deepest_section_explaining_most_of_the_excess() -> None:
    """forward.attention explains 90 %: it is the cause, not forward; else the spread."""
    laps = ["root.t"]
    excess = {"root.t.forward": 0.1, "root.t.forward.attention": 0.09, "root.t.data": 0.0}
    assert cause_of(excess, 0.1, 0.8, laps) == ("root.t.forward.attention", ())
    split = {"root.t.forward": 0.05, "root.t.data": 0.03, "root.t.optimizer": 0.02}
    assert cause_of(split, 0.1, 0.8, laps) == (
        None,
        ("root.t.forward", "root.t.data", "root.t.optimizer"),
    )
    assert cause_of(split, 0.0, 0.8, laps) == (None, ())


def test_the_straggler_count_looks_back_over_the_last_windows() -> None:
    """Each rank counts its own straggler windows over the last N, per subtree."""
    count = StragglerCount()
    seen = [count.count_with("root", w % 3 != 0, 10) for w in range(12)]
    assert seen == [0, 1, 2, 2, 3, 4, 4, 5, 6, 6, 7, 7]
    assert count.count_with("root.eval", True, 10) == 1


def test_thresholds_are_one_settable_table() -> None:
    """Overrides replace defaults by name; bad names and values get a clear error."""
    assert thresholds({"input_bound_warning": 0.05})["input_bound_warning"] == 0.05
    assert thresholds() == DEFAULTS
    with pytest.raises(ValueError, match="unknown name 'input_bound'"):
        thresholds({"input_bound": 0.1})
    with pytest.raises(ValueError, match="input_bound_critical=-1 must be a positive number"):
        thresholds({"input_bound_critical": -1})
    with pytest.raises(ValueError, match="input_bound_warning is above input_bound_critical"):
        thresholds({"input_bound_warning": 0.5})
    with pytest.raises(ValueError, match=r"chronic_count=2\.5 must be a positive number"):
        thresholds({"chronic_count": 2.5})
    assert "| `input_bound_critical` | 0.2 |" in markdown_table()


def test_configure_takes_roles_and_thresholds() -> None:
    """Unknown roles and thresholds are ConfigErrors; given ones reach every snapshot."""
    with pytest.raises(ConfigError, match="unknown role 'loading'"):
        capture(roles={"loading": ["fetch"]})
    with pytest.raises(ConfigError, match=r"wait_sections: 'a\.b' is not a section name"):
        capture(wait_sections=("a.b",))
    with pytest.raises(ConfigError, match="unknown name 'nope'"):
        capture(diagnosis_thresholds={"nope": 1.0})
    cap = capture(
        wait_sections=("backward",),
        diagnosis_thresholds={"input_bound_warning": 0.5, "input_bound_critical": 0.6},
    )
    try:
        snap = train(cap, 4, {"data": 0.030, "backward": 0.070})
        assert snap.roles.wait == frozenset({"backward"})
        assert warnings(snap.diagnosis()) == []
    finally:
        cap.lt.shutdown()


def test_wait_true_marks_that_path_as_a_wait_section(cap: Capture) -> None:
    """record(name, wait=True) and section(name, wait=True) mark those paths only, as wait."""
    train, evaluate = cap.lt.timer("train"), cap.lt.timer("eval")
    for _ in range(2):
        train.record()
        train.record("forward")
        cap.clock.advance(0.06)
        train.record("allreduce", wait=True)
        cap.clock.advance(0.03)
        with train.section("sync", wait=True):
            cap.clock.advance(0.01)
    train.stop()
    with evaluate.section("allreduce"):  # the same name elsewhere: not marked
        cap.clock.advance(0.5)
    snap = cap.lt.reset()
    assert snap.roles.wait_paths == {"root.train.allreduce", "root.train.sync"}
    assert {p: snap.roles.of(p) for p in snap} == {
        "root.eval": "evaluation",  # by its conventional name
        "root.eval.allreduce": None,
        "root.train": None,
        "root.train.allreduce": "wait",
        "root.train.forward": None,
        "root.train.sync": "wait",
    }
    figures = RankFigures.of(snap, snap.roles)
    assert (figures.waits, figures.wait_s) == (True, pytest.approx(0.08))


def test_wait_true_has_the_effect_of_wait_sections(cap: Capture) -> None:
    """A path marked wait=True counts as configure(wait_sections=...) names count it."""
    by_name = capture(wait_sections=("allreduce",))
    try:
        snaps = []
        for run, mark in ((cap, True), (by_name, False)):
            train = run.lt.timer("train")
            train.record()
            train.record("forward")
            run.clock.advance(0.06)
            train.record("allreduce", wait=mark)
            run.clock.advance(0.04)
            train.stop()
            snaps.append(run.lt.reset())
    finally:
        by_name.lt.shutdown()
    marked, named = (RankFigures.of(s, s.roles) for s in snaps)
    assert marked == named


def test_record_wait_without_a_section_is_a_timer_error(cap: Capture) -> None:
    """record(wait=True) marks nothing and says it needs a section name."""
    with pytest.raises(TimerError, match=r"root\.train\.record\(wait=True\) needs the name"):
        cap.lt.timer("train").record(wait=True)
    assert cap.lt.reset().roles.wait_paths == frozenset()


def test_eval_and_checkpoint_sections_have_their_roles_by_their_names(cap: Capture) -> None:
    """`eval` and `checkpoint` inside the steps count as other work with no `roles=` given."""
    snap = train(cap, 4, {"forward": 0.050, "eval": 0.030, "checkpoint": 0.020})
    [found] = [f for f in snap.diagnosis() if f.kind == "outside_laps"]
    assert (found.kind, found.path, found.rank) == ("outside_laps", "root.train", 0)
    assert set(found.evidence["others"]) == {"root.train.eval", "root.train.checkpoint"}


@pytest.mark.parametrize(
    ("name", "role"),
    [
        *[(n, "evaluation") for n in ("eval", "evaluate", "evaluation", "val", "validation")],
        *[(n, "checkpoint") for n in ("checkpoint", "ckpt", "save_checkpoint")],
        ("Eval", None),
        ("evaluator", None),
        ("checkpoints", None),
    ],
)
def test_the_conventional_role_names_are_exact(name: str, role: str | None) -> None:
    """Only the exact conventional names get a role; a case or a suffix is not guessed."""
    assert Roles().of(f"root.train.{name}") == role
    assert roles_of().of(f"root.train.{name}") == role


def test_a_role_given_replaces_its_conventional_names() -> None:
    """`roles={"evaluation": []}` turns the convention off; a name given is the only one."""
    assert roles_of({"evaluation": []}).of("root.train.eval") is None
    assert roles_of({"evaluation": []}).of("root.train.ckpt") == "checkpoint"
    mine = roles_of({"checkpoint": "snapshot_weights"})
    assert mine.of("root.train.checkpoint") is None
    assert mine.of("root.train.snapshot_weights") == "checkpoint"
    assert mine.of("root.train.val") == "evaluation"


def _spread(ranks: int, totals: list[float]) -> SectionSpread:
    """Return a path's spread over `ranks` ranks with these totals (other fields alike)."""
    low, high = min(totals), max(totals)
    total = RankSpread(low, high, sum(totals) / len(totals), totals.index(high), totals.index(low))
    return SectionSpread(ranks, (), total, total, total, total, total, total)


def test_one_slow_loader_is_no_job_wide_input_wait(cap: Capture) -> None:
    """Rank 1's loader 68 ms a step, the others' 0.3 ms: the median rank waits for nothing."""
    snap = train(cap, 10, {"data": 0.0003, "forward": 0.1})
    spreads = {
        "root.train": _spread(4, [1.003, 1.68, 1.003, 1.003]),
        "root.train.data": _spread(4, [0.003, 0.68, 0.003, 0.003]),
    }
    assert [f.kind for f in snap.with_spreads(spreads).diagnosis()] == []


def test_a_job_whose_median_rank_waits_for_input_is_input_bound(cap: Capture) -> None:
    """Three of four ranks 25 % in `data`: input_bound, critical, at the median rank's share."""
    snap = train(cap, 10, {"data": 0.025, "forward": 0.075})
    spreads = {
        "root.train": _spread(4, [1.0, 1.0, 1.0, 1.0]),
        "root.train.data": _spread(4, [0.25, 0.25, 0.25, 0.01]),
    }
    [found] = snap.with_spreads(spreads).diagnosis()
    assert (found.kind, found.severity, found.path, found.rank) == (
        "input_bound",
        "critical",
        "root.train.data",
        None,
    )
    assert found.evidence["share"] == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("values", "middle"),
    [([1.0], 1.0), ([1.0, 3.0], 1.0), ([1.0, 2.0, 9.0], 2.0), ([1.0, 2.0, 4.0, 9.0], 3.0)],
)
def test_the_middle_mean_is_the_median_of_up_to_four_ranks(
    values: list[float], middle: float
) -> None:
    """From min, max and mean alone: the median of 3 or 4 ranks, the lower of 2, 1's own."""
    mean = sum(values) / len(values)
    assert middle_mean(len(values), min(values), max(values), mean) == pytest.approx(middle)


def test_without_a_wait_section_no_culprit_is_named(cap: Capture) -> None:
    """A straggler by lap time alone (no wait section) is one info finding: no rank, no path."""
    snap = train(cap, 2, {"data": 0.005, "forward": 0.095})
    guess = Straggler(2, "outside_wait", 0.1, 0.2, "root.train.forward", chronic_rank=0)
    reduced = snap.with_spreads({}, guess)
    assert reduced.diagnosis() == []
    found = [f for f in reduced.diagnosis(min_severity="info") if f.kind.endswith("straggler")]
    assert [(f.kind, f.severity, f.path, f.rank) for f in found] == [
        ("straggler", "info", None, None)
    ]
    assert found[0].action.startswith("mark where ranks wait")


def _named(
    cap: Capture, excess_s: float, streak: int, **limits: float
) -> list[tuple[str, str, int | None]]:
    """Return (kind, severity, rank) of the straggler findings of a 2-step window."""
    snap = train(cap, 2, {"data": 0.005, "forward": 0.095})
    straggler = Straggler(1, "wait", excess_s, 0.2, "root.train.forward", streak=streak)
    found = snap.with_spreads({}, straggler).diagnosis(min_severity="info", **limits)
    return [(f.kind, f.severity, f.rank) for f in found if f.kind == "straggler"]


def test_a_straggler_warns_only_once_it_persists(cap: Capture) -> None:
    """40 % over in one window is info; in the second window in a row it is critical."""
    assert _named(cap, 0.08, streak=1) == [("straggler", "info", 1)]
    assert _named(cap, 0.08, streak=2) == [("straggler", "critical", 1)]
    assert _named(cap, 0.08, streak=1, straggler_windows=1) == [("straggler", "critical", 1)]


def test_a_straggler_under_the_minimum_time_per_step_is_noise(cap: Capture) -> None:
    """Over the share asked for, but 1.5 ms a step (under 2 ms): info, however long it lasts."""
    assert _named(cap, 0.003, streak=5, straggler_warning=0.01) == [("straggler", "info", 1)]
    assert _named(cap, 0.003, streak=5, straggler_warning=0.01, straggler_min_excess_s=0.001) == [
        ("straggler", "warning", 1)
    ]


def test_streaks_count_windows_in_a_row_naming_the_same_rank() -> None:
    """A streak grows with the same rank, restarts with another, ends with a quiet window."""
    streaks = StragglerStreaks()
    counted = [streaks.count("root", r) for r in (1, 1, 2, None, 2, 2, 2)]
    assert counted == [1, 2, 1, 0, 1, 2, 3]
    assert streaks.count("root.eval", 2) == 1


def test_slow_steps_of_the_warm_up_window_are_info(cap: Capture) -> None:
    """A run's first window may have slow first steps: info there, a warning after it."""
    timer = cap.lt.timer("train")
    windows = []
    for _ in range(2):
        for step in range(20):
            timer.record()
            with timer.section("forward"):
                cap.clock.advance(1.0 if step == 0 else 0.100)
        timer.stop()
        windows.append(cap.lt.reset())
    severities = [
        [f.severity for f in w.diagnosis(min_severity="info") if f.kind == "slow_steps"]
        for w in windows
    ]
    assert severities == [["info"], ["warning"]]


def _slow_window(cap: Capture, slow: int) -> Snapshot:
    """Run 20 steps of 100 ms, `slow` of them 1 s, and close the window."""
    timer = cap.lt.timer("train")
    for step in range(20):
        timer.record()
        cap.clock.advance(1.0 if step < slow else 0.100)
    timer.stop()
    return cap.lt.reset()


def _slow_steps(window: Snapshot, **overrides: float) -> list[tuple[str, Any]]:
    """Return the window's slow_steps findings as (severity, windows in a row)."""
    found = window.diagnosis(min_severity="info", **overrides)
    return [(f.severity, f.evidence["windows_in_a_row"]) for f in found if f.kind == "slow_steps"]


def test_slow_steps_in_one_window_only_are_info(cap: Capture) -> None:
    """A busy machine's burst: 2 slow steps of 20 in one window between quiet ones is info."""
    windows = [_slow_window(cap, slow) for slow in (0, 0, 2, 0)]
    assert [_slow_steps(w) for w in windows] == [[], [], [("info", 1)], []]


def test_slow_steps_in_two_windows_in_a_row_warn(cap: Capture) -> None:
    """Slow steps past their share in 2 windows in a row warn; 3 when so set; a quiet one resets."""
    windows = [_slow_window(cap, slow) for slow in (0, 2, 2, 2, 0, 2)]
    assert [_slow_steps(w) for w in windows] == [
        [], [("info", 1)], [("warning", 2)], [("warning", 2)], [], [("info", 1)]
    ]  # fmt: skip
    three = [_slow_steps(w, slow_steps_windows=3) for w in windows[1:4]]
    assert three == [[("info", 1)], [("info", 2)], [("warning", 3)]]


def test_the_row_looks_back_over_the_kept_windows_only(cap: Capture) -> None:
    """The run keeps its latest 8 windows: a row of 9 is seen, a longer one is refused."""
    windows = [_slow_window(cap, 2) for _ in range(RECENT_WINDOWS + 3)]
    last = windows[-1]
    assert _slow_steps(last, slow_steps_windows=RECENT_WINDOWS + 1) == [
        ("warning", RECENT_WINDOWS + 1)
    ]
    assert last.past is not None
    assert len(last.past.earlier()) == RECENT_WINDOWS
    with pytest.raises(ValueError, match="slow_steps_windows is above 9"):
        last.diagnosis(slow_steps_windows=RECENT_WINDOWS + 2)
