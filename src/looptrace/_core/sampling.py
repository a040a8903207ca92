"""Which outermost laps (steps) are traced: the same steps on every rank, no communication."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from looptrace._base.errors import ConfigError

DEFAULT_TRACE_FIRST: Final = 10
DEFAULT_TRACE_EVERY: Final = 100


@dataclass(frozen=True, slots=True)
class LapSampler:
    """Trace lap `n` when `n < trace_first` or `n` is a multiple of `trace_every`.

    `trace_every=0` traces no lap past the first `trace_first`. The decision depends on the
    lap index only, so every rank traces the same steps. Aggregation sees every section
    either way; only span creation is sampled. Made by `lap_sampler()`, which checks the
    settings.
    """

    trace_every: int = DEFAULT_TRACE_EVERY
    trace_first: int = DEFAULT_TRACE_FIRST

    def __call__(self, lap: int) -> bool:
        """Return whether lap `lap` is traced."""
        return self.traces(lap)

    def traces(self, lap: int) -> bool:
        """Return whether lap `lap` is traced (the engine's call: compiled, a direct one)."""
        every = self.trace_every
        return lap < self.trace_first or (every != 0 and lap % every == 0)


def lap_sampler(trace_every: object, trace_first: object) -> LapSampler:
    """Return the sampler of these settings; a `ConfigError` names one that is not an int >= 0."""
    return LapSampler(
        trace_every=_lap_count("trace_every", trace_every),
        trace_first=_lap_count("trace_first", trace_first),
    )


def _lap_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be an int >= 0, got {value!r}")
    return value
