"""`configure(diagnose="log")`: a finding is logged once when it appears and once when it clears."""

from __future__ import annotations

import logging

import pytest

from looptrace import ConfigError
from looptrace._export.settings_table import setting
from looptrace.testing import Capture, capture

INPUT_ACTION = "more DataLoader workers, pin_memory, prefetching, or lighter transforms"


def windows(cap: Capture, data_s: list[float]) -> None:
    """Close one window of 4 laps of `root.train` per entry: that many seconds in data."""
    train = cap.lt.timer("train")
    for data in data_s:
        for _ in range(4):
            train.record()
            train.record("data")
            cap.clock.advance(data)
            train.record("forward")
            cap.clock.advance(0.1 - data)
        train.stop()
        train.reset()


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """Return the looptrace logger's (level, message) records."""
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "looptrace"]


def test_a_finding_is_logged_when_it_appears_and_when_it_clears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Input-bound for two windows, then healthy: one line as it appears, one as it clears."""
    caplog.set_level(logging.INFO, logger="looptrace")
    cap = capture(trace_every=0, diagnose="log")
    try:
        windows(cap, [0.03, 0.03, 0.002, 0.002])
    finally:
        cap.lt.shutdown()
    assert logged(caplog) == [
        (
            "ERROR",
            "looptrace finding critical input_bound (window of root.train at step 4): 30% of "
            "the root.train lap waits for input in root.train.data (0.120 s of 0.400 s); "
            f"try: {INPUT_ACTION}",
        ),
        (
            "WARNING",
            "looptrace finding cleared input_bound (window of root.train at step 12), was: "
            "30% of the root.train lap waits for input in root.train.data (0.120 s of 0.400 s)",
        ),
    ]


def test_without_diagnose_nothing_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """The default (`off`) logs no finding, however input-bound the run."""
    caplog.set_level(logging.INFO, logger="looptrace")
    cap = capture(trace_every=0)
    try:
        windows(cap, [0.03, 0.002])
    finally:
        cap.lt.shutdown()
    assert [m for _, m in logged(caplog) if "finding" in m] == []


def test_the_variable_turns_it_on_and_bad_values_are_named(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """LOOPTRACE_DIAGNOSE=log logs without the argument; other values are ConfigErrors."""
    caplog.set_level(logging.INFO, logger="looptrace")
    monkeypatch.setenv("LOOPTRACE_DIAGNOSE", "LOG")
    cap = capture(trace_every=0)
    try:
        windows(cap, [0.03])
    finally:
        cap.lt.shutdown()
    assert [level for level, _ in logged(caplog)] == ["ERROR"]
    with pytest.raises(ConfigError, match="diagnose: expected 'off' or 'log', got 'print'"):
        capture(diagnose="print")
    monkeypatch.setenv("LOOPTRACE_DIAGNOSE", "loud")
    with pytest.raises(
        ConfigError, match="LOOPTRACE_DIAGNOSE: expected 'off' or 'log', got 'loud'"
    ):
        capture()
    assert setting("LOOPTRACE_DIAGNOSE").argument == "diagnose"
