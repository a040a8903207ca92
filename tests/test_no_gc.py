"""The collector paused while reading: resumed after, as it was, even after an error."""

from __future__ import annotations

import gc

import pytest

from looptrace._offline.no_gc import paused_gc


def test_the_collector_is_paused_inside_and_resumed_after() -> None:
    """Running before: off inside, on again after, also when the block raises."""
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError, match="boom"), paused_gc():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off() -> None:
    """Paused by the application already: left off after the block."""
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
