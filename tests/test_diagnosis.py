"""The diagnosis of one window on a fake clock: exact findings, abstentions, thresholds, roles."""

from __future__ import annotations

from typing import Any

import pytest

from looptrace import ConfigError, Snapshot
from looptrace._stats.diagnosis import Finding
from looptrace._stats.straggler import Straggler, StragglerCount, cause_of
from looptrace._stats.thresholds import DEFAULTS, markdown_table, thresholds
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
    assert snap.diagnosis() == [STRAGGLER_ABSTAINS, *NOT_WATCHED]


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
    findings = snap.diagnosis()
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
    [found] = [f for f in snap.diagnosis() if f.kind == "slow_steps"]
    assert (found.severity, found.path, found.evidence) == (
        "warning",
        "root.train",
        {"slow": 1, "steps": 20, "median_s": pytest.approx(0.1), "worst_s": pytest.approx(1.0)},
    )
    assert found.message == (
        "1 of 20 root.train steps took over 3x the median 0.100 s; the worst 1.000 s"
    )


def test_a_straggler_is_named_with_its_cause(cap: Capture) -> None:
    """A window carrying a straggler: rank 1, 40 % over, cause forward; then chronic too."""
    snap = train(cap, 2, {"data": 0.005, "forward": 0.095})
    straggler = Straggler(
        rank=1, by="wait", excess_s=0.08, typical_s=0.2, cause="root.train.forward",
        excess_by_path={"root.train.forward": 0.08}, chronic_rank=1, chronic_count=7,
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
    spread = Straggler(1, "outside_wait", 0.08, 0.2, None, ("root.train.a", "root.train.b"))
    [found_spread] = [f for f in snap.with_spreads({}, spread).diagnosis() if f.kind == "straggler"]
    assert found_spread.message.endswith(
        "cause spread over several sections: root.train.a, root.train.b"
    )
    assert found_spread.path is None


def test_a_cross_rank_window_without_a_straggler_says_why(cap: Capture) -> None:
    """A reduced window where fewer than two ranks lapped abstains with that reason."""
    snap = train(cap, 2, {"data": 0.005, "forward": 0.095}).with_spreads({})
    [found] = [f for f in snap.diagnosis() if f.kind == "straggler"]
    assert found == Finding(
        "straggler", "info", None, None,
        "fewer than two ranks ran laps: no straggler to name", "", ABSTAINED,
    )  # fmt: skip


def test_an_empty_window_finds_nothing_alarming() -> None:
    """A window with no path abstains everywhere and warns of nothing."""
    findings = Snapshot({}, start_ns=0, end_ns=0, rank=0).diagnosis()
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
