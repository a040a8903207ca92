"""One definition of a slow step: the steps the diagnosis calls slow are those traced as slow."""

from __future__ import annotations

import pytest

from looptrace._core.slow_laps import DEFAULT_FACTOR, MIN_EXCESS_NS
from looptrace._stats.thresholds import DEFAULTS
from looptrace.testing import capture


def test_the_diagnosis_and_the_tracing_share_factor_and_minimum_excess() -> None:
    """slow_step_factor and slow_step_min_excess_s are the slow-lap tracing's own defaults."""
    assert DEFAULTS["slow_step_factor"] == DEFAULT_FACTOR
    assert DEFAULTS["slow_step_min_excess_s"] == pytest.approx(MIN_EXCESS_NS / 1e9)


def test_alternating_fast_and_slow_steps_are_slow_for_both() -> None:
    """1 ms and 5 ms steps in turn: slow_steps names them and slow laps are traced too."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("train")
    for step in range(40):
        train.record()
        cap.clock.advance(0.005 if step % 2 else 0.001)
    train.stop()
    snapshot = cap.lt.reset()
    cap.lt.shutdown()
    found = [
        (f.kind, f.path)
        for f in snapshot.diagnosis(warmup_windows=0, slow_steps_windows=1)
        if f.kind == "slow_steps"
    ]
    assert found == [("slow_steps", "root.train")]
    traced = [s for s in cap.finished_spans() if "looptrace.slow_lap" in (s.attributes or {})]
    assert traced
    assert {(s.attributes or {})["looptrace.step"] % 2 for s in traced} == {1}
