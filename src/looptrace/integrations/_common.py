"""What the integrations share: flat metric keys of a window, and the internal-error guard."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from looptrace._stats.snapshot import path_levels

if TYPE_CHECKING:
    from looptrace._looptrace import Looptrace
    from looptrace._stats.snapshot import SectionStats

# The statistics an integration logs unless told otherwise.
DEFAULT_STATS = ("mean", "p50", "p99", "max", "total", "count")


def flat_metrics(
    stats: Mapping[str, SectionStats],
    *,
    prefix: str = "timing",
    stats_names: Iterable[str] = DEFAULT_STATS,
    sep: str = ".",
) -> dict[str, float]:
    """Return `{prefix}{sep}{path}{sep}{stat}` per path and chosen statistic, NaN left out.

    The dots of each path become `sep` too, so `sep="/"` gives `timing/root/train/forward/mean`,
    which W&B, TensorBoard and Lightning loggers group by; `%` and `sep` inside a section name
    are percent-encoded as `Snapshot.as_metrics` does, so distinct paths keep distinct keys.
    """
    names = tuple(stats_names)
    levels = path_levels(sep)
    head = f"{prefix}{sep}" if prefix else ""
    flat: dict[str, float] = {}
    for path, entry in stats.items():
        key = head + levels(path)
        for name in names:
            value = float(getattr(entry, name))
            if not math.isnan(value):
                flat[f"{key}{sep}{name}"] = value
    return flat


def failed(lt: Looptrace, where: str) -> None:
    """Count and log (once per site) an exception swallowed so that training goes on.

    Call from inside an `except` block; the count is `lt.health().internal_errors`.
    """
    lt.internal_error(where)


def checked_stats(names: Iterable[str], owner: str) -> tuple[str, ...]:
    """Return `names` as a tuple after checking each is a statistic of `SectionStats`.

    Raises:
        ConfigError: a name that is not one of them, named.

    """
    from looptrace._base.errors import ConfigError  # noqa: PLC0415
    from looptrace._stats.snapshot import METRIC_STATS  # noqa: PLC0415

    chosen = (names,) if isinstance(names, str) else tuple(names)
    unknown = [name for name in chosen if name not in METRIC_STATS]
    if unknown or not chosen:
        raise ConfigError(
            f"{owner}: stats must be some of {', '.join(METRIC_STATS)}; got {chosen!r}"
        )
    return chosen


def step_of(snapshot: object, step: int | None, owner: str) -> int:
    """Return `step`, else the snapshot's own `step` (outermost laps completed).

    Raises:
        ConfigError: neither is there.

    """
    from looptrace._base.errors import ConfigError  # noqa: PLC0415

    if step is None:
        step = getattr(snapshot, "step", None)
    if step is None:
        raise ConfigError(f"{owner}(): pass step=; this snapshot carries no step")
    return int(step)
