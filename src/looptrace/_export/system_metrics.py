"""The system figures of the latest window as a gauge: OTLP's points and Prometheus's family.

One gauge, `looptrace.system.window` (`looptrace_system_window` in Prometheus), a point per
figure and statistic, named by the attribute `looptrace.system` (`host_cpu_percent.max`,
`gpu0_power_w.mean`): part of a rank's detail, like the memory gauge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry.sdk.metrics.export import Metric

from looptrace._export.metric_data import Points, gauge

if TYPE_CHECKING:
    from looptrace._export.totals import Totals

SYSTEM_METRIC = "looptrace.system.window"
SYSTEM_FAMILY = "looptrace_system_window"
SYSTEM_DESCRIPTION = (
    "The system figures sampled in the latest window that had any, mean and max of each: "
    "process and host CPU percent, resident and available bytes, per GPU utilisation "
    "percent, memory used bytes, temperature (C) and power (W)."
)
SYSTEM = "looptrace.system"  # the attribute naming the figure and statistic


def system_points(totals: Totals, base: dict[str, int]) -> Points:
    """Return this rank's system figures of the latest window that had any."""
    return [({**base, SYSTEM: name}, value) for name, value in sorted(totals.system.items())]


def system_metrics(totals: Totals, base: dict[str, int], start: int) -> list[Metric]:
    """Return the system gauge (part of a rank's detail), where a window had figures."""
    points = system_points(totals, base)
    if not points:
        return []
    return [gauge(SYSTEM_METRIC, SYSTEM_DESCRIPTION, "1", points, start=start, now=totals.time_ns)]
