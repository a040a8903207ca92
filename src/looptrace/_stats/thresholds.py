"""The diagnosis's thresholds: one table, each settable, rendered in the docs as it stands here."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Threshold:
    """One threshold: its name, default value and what crossing it means."""

    name: str
    default: float
    meaning: str


_OTHER = "share of the window's wall time in other timers, evaluation and checkpoints"
_EXCESS = "the straggler's excess, of the typical rank's lap time outside wait sections"
_IDLE = "share of the window a GPU was idle (1 less its mean utilisation; the least busy GPU)"
_CREEP = "rise of the device's peak allocated over its first window after the warm-up"
TABLE = (
    Threshold("input_bound_warning", 0.10, "share of the median rank's lap spent in `data`"),
    Threshold("input_bound_critical", 0.20, "share of the median rank's lap spent in `data`"),
    Threshold("outside_laps_warning", 0.10, _OTHER),
    Threshold("outside_laps_critical", 0.30, _OTHER),
    Threshold("self_time_warning", 0.10, "share of the lap in no section (its self time)"),
    Threshold("self_time_critical", 0.25, "share of the lap in no section (its self time)"),
    Threshold("straggler_warning", 0.10, _EXCESS),
    Threshold("straggler_critical", 0.25, _EXCESS),
    Threshold("straggler_min_excess_s", 0.002, "the straggler's excess per step, at least"),
    Threshold("straggler_windows", 2, "windows in a row naming the same straggler to warn"),
    Threshold("straggler_cause", 0.80, "share of the excess one section must explain"),
    Threshold("chronic_count", 6, "windows named straggler, of the last `chronic_windows`"),
    Threshold("chronic_windows", 10, "windows a rank's straggler count looks back over"),
    Threshold("slow_step_factor", 3.0, "a step slower than this many times the median is slow"),
    Threshold("slow_step_min_excess_s", 0.001, "a slow step also exceeds the median by this much"),
    Threshold("slow_steps_warning", 0.05, "share of the steps that are slow"),
    Threshold("slow_steps_windows", 2, "windows in a row with slow steps past their share to warn"),
    Threshold("warmup_windows", 1, "windows at a run's start that memory creep and drops skip"),
    Threshold("memory_creep_share", 0.10, _CREEP),
    Threshold("memory_creep_gib", 1.0, _CREEP + " (GiB)"),
    Threshold(
        "host_creep_gib",
        0.25,
        "rise of the host resident memory over its first window "
        "after the warm-up (GiB; with `memory_creep_share`)",
    ),
    Threshold(
        "memory_pressure_share",
        0.92,
        "the window's peak reserved, of the device's total (host: resident, of the limit)",
    ),
    Threshold("gpu_idle_warning", 0.50, _IDLE),
    Threshold("gpu_idle_critical", 0.75, _IDLE),
    Threshold(
        "host_cpu_busy", 0.90, "the host's mean CPU use (all cores) that starves an input wait"
    ),
    Threshold("system_min_samples", 3, "readings of a system figure a window needs to be judged"),
    Threshold("throughput_drop_windows", 2, "windows in a row below the level to warn"),
    Threshold(
        "throughput_drop_share", 0.10, "a window's units per second below the run's sustained level"
    ),
)
RECENT_WINDOWS = 8  # a run's latest windows of a timer kept for `slow_steps_windows`
DEFAULTS: Mapping[str, float] = MappingProxyType({t.name: t.default for t in TABLE})
_WHOLE = (
    "chronic_count",
    "chronic_windows",
    "warmup_windows",
    "straggler_windows",
    "slow_steps_windows",
    "throughput_drop_windows",
    "system_min_samples",
)
_ZERO_OK = ("warmup_windows",)


def thresholds(overrides: Mapping[str, float] | None = None) -> Mapping[str, float]:
    """Return the thresholds, `overrides` replacing defaults by name.

    Raises:
        ValueError: an unknown name, a value that is not a positive finite number (a whole
            number for the chronic-straggler counts; `warmup_windows` a whole number that
            may be 0), a warning above its critical level, or `slow_steps_windows` above
            the windows a run keeps (`RECENT_WINDOWS` + 1).

    """
    chosen = dict(DEFAULTS)
    for name, value in (overrides or {}).items():
        if name not in DEFAULTS:
            raise ValueError(
                f"thresholds: unknown name {name!r}; choose from {', '.join(DEFAULTS)}"
            )
        number = (
            float(value) if isinstance(value, int | float) and not isinstance(value, bool) else -1
        )
        lowest_ok = number >= 0 if name in _ZERO_OK else number > 0
        if not (math.isfinite(number) and lowest_ok) or (name in _WHOLE and number != int(number)):
            what = "a whole number >= 0" if name in _ZERO_OK else "a positive number"
            raise ValueError(f"thresholds: {name}={value!r} must be {what}")
        chosen[name] = number
    for kind in ("input_bound", "outside_laps", "self_time", "straggler", "gpu_idle"):
        if chosen[f"{kind}_warning"] > chosen[f"{kind}_critical"]:
            raise ValueError(f"thresholds: {kind}_warning is above {kind}_critical")
    if chosen["chronic_count"] > chosen["chronic_windows"]:
        raise ValueError("thresholds: chronic_count is above chronic_windows")
    if chosen["slow_steps_windows"] > RECENT_WINDOWS + 1:
        raise ValueError(
            f"thresholds: slow_steps_windows is above {RECENT_WINDOWS + 1}, "
            "the windows a run keeps to compare"
        )
    return MappingProxyType(chosen)


def markdown_table() -> str:
    """Return the thresholds as a Markdown table (name, default, what it measures)."""
    rows = ["| threshold | default | compared with |", "|---|---|---|"]
    rows += [f"| `{t.name}` | {t.default:g} | {t.meaning} |" for t in TABLE]
    return "\n".join(rows)
