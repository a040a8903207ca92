"""The public surface: `looptrace/__init__.py`."""

from __future__ import annotations

import pytest

import looptrace


def test_public_names_are_what_configure_takes_and_returns() -> None:
    """`looptrace` exports the device clock configure() accepts, not the internal lap sampler."""
    assert "DeviceClock" in looptrace.__all__
    assert looptrace.DeviceClock.__name__ == "DeviceClock"
    assert "LapSampler" not in looptrace.__all__
    with pytest.raises(AttributeError, match="LapSampler"):
        _ = looptrace.LapSampler  # type: ignore[attr-defined]
