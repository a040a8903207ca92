"""The misuse policy (docs/architecture.md, semantics 7): bad names raise, misuse is counted."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import pytest

import looptrace
from looptrace.testing import Capture, capture

from .helpers.timing import counts


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "must not be empty"),
        (3, "must be a str, got int 3"),
        (None, "must be a str, got NoneType"),
        ("a.b", r"contains '\.'"),
        (["x"], r"must be a str, got list \['x'\]"),
        ({}, "must be a str, got dict {}"),
        ("x" * 201, "is 201 characters long; the limit is 200"),
    ],
)
def test_bad_section_names_raise_before_changing_anything(
    cap: Capture, name: object, message: str
) -> None:
    """A bad section name raises TimerError naming the problem; earlier data is kept."""
    train = cap.lt.timer("training")
    train.record("data")
    cap.clock.advance(1.0)
    with pytest.raises(looptrace.TimerError, match=message):
        if name is None:
            train.section(name)  # type: ignore[arg-type]
        else:
            train.record(name)  # type: ignore[arg-type]
    assert train.timer("data").running
    train.stop()
    assert counts(cap.lt.reset()) == {"root.training": 1, "root.training.data": 1}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("training.forward", r"contains '\.'"),
        ({}, "must be a str, got dict {}"),
        (["x"], r"must be a str, got list \['x'\]"),
        ("t" * 1_000_000, "is 1000000 characters long; the limit is 200"),
    ],
)
def test_bad_timer_name_raises(cap: Capture, name: object, message: str) -> None:
    """lt.timer() validates its name the same way, whatever the type."""
    with pytest.raises(looptrace.TimerError, match=message):
        cap.lt.timer(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("use", ["record", "section", "timer", "timed", "lt.timer", "iterate"])
def test_a_name_that_is_not_utf8_text_is_refused_at_the_call(cap: Capture, use: str) -> None:
    """A lone surrogate (os.fsdecode of a non-UTF-8 file name) is a TimerError, shown escaped."""
    name = os.fsdecode(b"shard-\xff")
    train = cap.lt.timer("training")
    train.record("data")
    cap.clock.advance(1.0)
    calls: dict[str, Callable[[], object]] = {
        "record": lambda: train.record(name),
        "section": lambda: train.section(name),
        "timer": lambda: train.timer(name),
        "timed": lambda: train.timed(name)(lambda: None),
        "lt.timer": lambda: cap.lt.timer(name),
        "iterate": lambda: train.iterate([1], section=name),
    }
    owner = "root" if use == "lt.timer" else "root.training"
    with pytest.raises(looptrace.TimerError) as raised:
        calls[use]()
    assert str(raised.value) == (
        f"section name 'shard-\\udcff' of timer {owner!r} cannot be encoded as UTF-8 "
        "(character '\\udcff' at index 6): names must be text, e.g. bytes decoded with "
        "errors='replace'"
    )
    assert train.timer("data").running
    train.stop()
    assert counts(cap.lt.reset()) == {"root.training": 1, "root.training.data": 1}


def test_names_beyond_ascii_are_accepted(cap: Capture) -> None:
    """Any text that encodes as UTF-8 names a section: accents, CJK, emoji."""
    train = cap.lt.timer("training")
    for name in ("données", "数据", "step-🚀"):
        train.record(name)
    train.stop()
    assert set(counts(cap.lt.reset())) == {
        "root.training",
        "root.training.données",
        "root.training.数据",
        "root.training.step-🚀",
    }


def test_longest_allowed_name_works(cap: Capture) -> None:
    """A name of exactly the documented limit is a normal section."""
    name = "n" * 200
    cap.lt.timer("training").record(name)
    cap.lt.timer("training").stop()
    assert counts(cap.lt.reset()) == {"root.training": 1, f"root.training.{name}": 1}


def test_names_past_the_path_cap_keep_no_state_of_their_own() -> None:
    """20,000 distinct names with max_paths=10: per-name state stays at the cap, time is kept."""
    cap = capture(max_paths=10, trace_every=0)
    train = cap.lt.timer("training")
    for i in range(20_000):
        train.record(f"step{i}")
        cap.clock.advance(0.001)
    with train.section("late"):
        cap.clock.advance(0.001)
    train.stop()
    snap = cap.lt.reset()
    engine = cap.lt._engine
    assert len(train._children) == 9
    assert len(engine.state().nodes) <= 11
    assert len(engine.spans._bases) <= 11
    assert counts(snap) == {
        "root.training": 1,
        **{f"root.training.step{i}": 1 for i in range(9)},
        "root.training.other": 19_992,
    }
    assert round(sum(s.self_time for s in snap.values()), 9) == 20.001
    assert cap.lt.health().overflowed == 19_992


def test_timer_error_is_a_value_error() -> None:
    """TimerError can be caught as ValueError."""
    assert issubclass(looptrace.TimerError, ValueError)


def test_stop_on_stopped_timer_is_a_counted_logged_noop(
    cap: Capture, caplog: pytest.LogCaptureFixture
) -> None:
    """stop() on a stopped timer changes nothing, is counted, and is logged once."""
    train = cap.lt.timer("training")
    train.record()
    cap.clock.advance(1.0)
    train.stop()
    with caplog.at_level(logging.WARNING, logger="looptrace"):
        train.stop()
        train.stop()
    assert cap.lt.health().misuse == 2
    assert [r.getMessage() for r in caplog.records] == [
        "looptrace: root.training.stop() on a stopped timer (ignored; further cases are "
        "counted, not logged)"
    ]
    assert counts(cap.lt.reset()) == {"root.training": 1}


def test_use_after_shutdown_is_a_counted_noop(cap: Capture) -> None:
    """After shutdown() timers and reset() do nothing and never raise; each call is counted.

    shutdown() itself closes a last window, so what ran before it reached the metrics.
    """
    train = cap.lt.timer("training")
    train.record()
    cap.clock.advance(1.0)
    cap.lt.shutdown()
    cap.lt.shutdown()  # idempotent
    assert _metric_counts(cap) == {"root.training": 1}
    train.record("forward")
    train.stop()
    with train.section("eval"):
        pass
    assert dict(cap.lt.reset()) == {}
    assert cap.lt.health().misuse == 4  # record, stop, section entry, reset


def test_section_stop_more_often_than_started_is_counted(cap: Capture) -> None:
    """Stopping a section object that is not running is a counted no-op."""
    section = cap.lt.timer("training").section("x")
    section.stop()
    assert cap.lt.health().misuse == 1


def _metric_counts(cap: Capture) -> dict[str, int]:
    data = cap.metrics.get_metrics_data()
    assert data is not None
    (metric,) = [
        m
        for m in data.resource_metrics[0].scope_metrics[0].metrics
        if m.name == "looptrace.section.duration"
    ]
    return {p.attributes["looptrace.path"]: p.count for p in metric.data.data_points}  # type: ignore[union-attr,misc]
