"""Which outermost laps (steps) are traced: the same steps on every rank, no communication."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from looptrace._stats.errors import ConfigError

DEFAULT_TRACE_FIRST = 10
DEFAULT_TRACE_EVERY = 100


@dataclass(frozen=True, slots=True)
class LapSampler:
    """Trace lap `n` when `n < trace_first` or `n` is a multiple of `trace_every`.

    `trace_every=0` traces no lap past the first `trace_first`. The decision depends on the
    lap index only, so every rank traces the same steps. Aggregation sees every section
    either way; only span creation is sampled.
    """

    trace_every: int = DEFAULT_TRACE_EVERY
    trace_first: int = DEFAULT_TRACE_FIRST

    def __post_init__(self) -> None:
        for name in ("trace_every", "trace_first"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an int >= 0, got {value!r}")

    def __call__(self, lap: int) -> bool:
        """Return whether lap `lap` is traced."""
        every = self.trace_every
        return lap < self.trace_first or (every != 0 and lap % every == 0)

    @classmethod
    def resolve(
        cls,
        trace_every: int | None,
        trace_first: int | None,
        environ: Mapping[str, str] | None = None,
    ) -> LapSampler:
        """Combine explicit arguments, `OTEL_TRACES_SAMPLER[_ARG]`, and the defaults.

        Explicit arguments win. The standard samplers map onto laps: `always_on` traces every
        lap, `always_off` none, `traceidratio` with argument r every `round(1/r)`-th lap (the
        `parentbased_` variants alike, since a lap span has no parent to follow).
        """
        env = os.environ if environ is None else environ
        from_env = _from_otel_sampler(env)
        every = trace_every if trace_every is not None else from_env[0]
        first = trace_first if trace_first is not None else from_env[1]
        if trace_every is not None and trace_first is None:
            first = 0  # an explicit trace_every alone means exactly that
        return cls(trace_every=every, trace_first=first)


def _from_otel_sampler(env: Mapping[str, str]) -> tuple[int, int]:
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower().removeprefix("parentbased_")
    if not name:
        return DEFAULT_TRACE_EVERY, DEFAULT_TRACE_FIRST
    if name == "always_on":
        return 1, 0
    if name == "always_off":
        return 0, 0
    if name == "traceidratio":
        raw = env.get("OTEL_TRACES_SAMPLER_ARG", "1.0")
        try:
            ratio = float(raw)
        except ValueError:
            raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG={raw!r} is not a number") from None
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG={raw!r} is not within [0, 1]")
        return (0 if ratio == 0 else max(1, round(1 / ratio))), 0
    raise ConfigError(
        f"OTEL_TRACES_SAMPLER={env['OTEL_TRACES_SAMPLER']!r} is not one of always_on, "
        "always_off, traceidratio (optionally parentbased_)"
    )
