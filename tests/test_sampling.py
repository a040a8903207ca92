"""Which steps are traced: trace_every, trace_first, OTEL_TRACES_SAMPLER, and the default."""

from __future__ import annotations

import pytest

from looptrace import ConfigError
from looptrace._core.sampling import LapSampler
from looptrace._core.sampling import lap_sampler as checked_sampler
from looptrace._export.run_settings import lap_sampler


def _traced(sampler: LapSampler, laps: int = 250) -> list[int]:
    return [lap for lap in range(laps) if sampler(lap)]


def test_default_traces_first_ten_then_every_hundredth() -> None:
    """With nothing configured, steps 0-9 and every 100th are traced."""
    sampler = lap_sampler(None, None, {})
    assert _traced(sampler) == [*range(10), 100, 200]


def test_explicit_trace_every_alone_means_multiples_only() -> None:
    """trace_every=N alone traces exactly the multiples of N, lap 0 included."""
    assert _traced(lap_sampler(50, None, {})) == [0, 50, 100, 150, 200]
    assert _traced(lap_sampler(1, None, {}), 5) == [0, 1, 2, 3, 4]


def test_trace_first_and_every_combine() -> None:
    """trace_first=K adds the first K steps to the multiples of trace_every."""
    assert _traced(lap_sampler(100, 3, {})) == [0, 1, 2, 100, 200]
    assert _traced(lap_sampler(0, 2, {})) == [0, 1]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"OTEL_TRACES_SAMPLER": "always_on"}, list(range(12))),
        ({"OTEL_TRACES_SAMPLER": "always_off"}, []),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, [0, 4, 8]),
        (
            {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"},
            [0, 2, 4, 6, 8, 10],
        ),
    ],
)
def test_otel_traces_sampler_maps_onto_laps(env: dict[str, str], expected: list[int]) -> None:
    """The standard sampler variables choose laps deterministically (the same on every rank)."""
    assert _traced(lap_sampler(None, None, env), 12) == expected


def test_explicit_argument_beats_environment() -> None:
    """An explicit trace_every wins over OTEL_TRACES_SAMPLER."""
    sampler = lap_sampler(3, None, {"OTEL_TRACES_SAMPLER": "always_off"})
    assert _traced(sampler, 7) == [0, 3, 6]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "'jaeger_remote' is not one of"),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"},
            "OTEL_TRACES_SAMPLER_ARG='half' is not a number",
        ),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
            r"OTEL_TRACES_SAMPLER_ARG='2' is not within \[0, 1\]",
        ),
    ],
)
def test_bad_sampler_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    """Unsupported or malformed sampler variables raise an error naming them."""
    with pytest.raises(ConfigError, match=message):
        lap_sampler(None, None, env)


def test_negative_values_rejected() -> None:
    """Negative trace_first is refused with the setting named."""
    with pytest.raises(ConfigError, match="trace_first must be an int >= 0, got -1"):
        checked_sampler(1, -1)
