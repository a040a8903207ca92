"""The public surface: `looptrace/__init__.py`."""

from __future__ import annotations

import pickle
from types import FunctionType, ModuleType

import pytest

import looptrace
import looptrace.testing
from looptrace import (
    ConfigError,
    Finding,
    Health,
    RankInfo,
    RankSpread,
    Rate,
    RateSpread,
    SectionSpread,
    SectionStats,
    Straggler,
    TimerError,
    WindowMemory,
)
from looptrace._core.build import core_kind


def test_public_names_are_what_configure_takes_and_returns() -> None:
    """`looptrace` exports the device clock configure() accepts, not the internal lap sampler."""
    assert "DeviceClock" in looptrace.__all__
    assert looptrace.DeviceClock.__name__ == "DeviceClock"
    assert "LapSampler" not in looptrace.__all__
    with pytest.raises(AttributeError, match="LapSampler"):
        _ = looptrace.LapSampler  # type: ignore[attr-defined]


def _public_classes_and_functions(module: ModuleType) -> list[tuple[str, object]]:
    """Return the classes and functions of `module.__all__` exported under their own name."""
    exported = [(name, getattr(module, name)) for name in module.__all__]
    return [
        (name, value)
        for name, value in exported
        if isinstance(value, type | FunctionType) and value.__name__ == name
    ]


@pytest.mark.parametrize("module", [looptrace, looptrace.testing], ids=lambda m: m.__name__)
def test_public_names_report_their_public_module(module: ModuleType) -> None:
    """A public class or function says where users import it from, not its private module."""
    found = _public_classes_and_functions(module)
    assert found
    assert {name: value.__module__ for name, value in found} == {  # type: ignore[attr-defined]
        name: module.__name__ for name, _ in found
    }


_STATS = SectionStats(2, 0.2, 0.1, 0.1, 0.1, 0.0, 0.1, 0.1, 0.1, 0.2, 0, (0, 2))
_SPREAD = RankSpread(min=1.0, max=2.0, mean=1.5, slowest_rank=1, fastest_rank=0)
PICKLED = [
    _STATS,
    _SPREAD,
    SectionSpread(2, (), _SPREAD, _SPREAD, _SPREAD, _SPREAD, _SPREAD, _SPREAD),
    RateSpread(2, 10.0, 5.0, 2.0, 3.0, 2.5, 0, 1),
    Rate(total=10.0, per_s=5.0, per_lap_s=1.0, per_lap=2.0),
    RankInfo(rank=1, world_size=2),
    WindowMemory(host_rss=1, host_peak_rss=2),
    Straggler(rank=1, by="wait", excess_s=0.1, typical_s=1.0, cause=None),
    Finding("slow", "warning", None, None, "a message", "an action"),
    Health(misuse=1),
]


@pytest.mark.parametrize("value", PICKLED, ids=lambda v: type(v).__name__)
def test_public_values_pickle_by_their_public_name(value: object) -> None:
    """A public value pickles as `looptrace.<Name>` and loads back equal."""
    data = pickle.dumps(value)
    assert b"looptrace._" not in data
    if isinstance(value, Health) and core_kind() == "compiled":
        pytest.skip("compiled, Health's frozen fields refuse the unpickler's assignments")
    assert pickle.loads(data) == value


@pytest.mark.parametrize("error", [ConfigError("bad setting"), TimerError("bad call")])
def test_public_errors_pickle_by_their_public_name(error: Exception) -> None:
    """Looptrace's errors cross a process boundary (multiprocessing) by their public name."""
    data = pickle.dumps(error)
    assert b"looptrace._" not in data
    back = pickle.loads(data)
    assert (type(back), back.args) == (type(error), error.args)
