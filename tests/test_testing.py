"""The shipped test helpers: FakeClock and the looptrace_capture pytest fixture."""

from __future__ import annotations

import pytest

from looptrace.testing import Capture, FakeClock


def test_fixture_is_registered_as_a_plugin(looptrace_capture: Capture) -> None:
    """The looptrace_capture fixture comes from the installed pytest plugin."""
    looptrace_capture.lt.timer("t").record()
    looptrace_capture.clock.advance(0.25)
    assert looptrace_capture.lt.reset()["root.t"].total == 0.25


def test_fake_clock_moves_only_forward() -> None:
    """advance() moves both readings; going back is refused."""
    clock = FakeClock(start_s=5.0)
    wall = clock.time_ns()
    clock.advance(1.5)
    assert clock.monotonic_ns() == 6_500_000_000
    assert clock.time_ns() - wall == 1_500_000_000
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1)
