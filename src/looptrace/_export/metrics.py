"""What looptrace's metrics are: names, units, descriptions and the attributes of a point.

Every metric path (the OTLP push, an application's MeterProvider, the Prometheus endpoint)
renders these same definitions, so a name or a label is written here once.
"""

from __future__ import annotations

from looptrace._base.attributes import PATH, SPAN_NAME
from looptrace._distributed.ranks import RANK
from looptrace._export.encodable import encodable

DURATION_METRIC = "looptrace.section.duration"
DURATION_DESCRIPTION = "Duration of timed sections of the training or inference loop."
WINDOW_METRIC = "looptrace.section.window.duration"
WINDOW_DESCRIPTION = (
    "Exact quantiles of section durations over the latest reset() window the section ran in."
)
DROPPED_METRIC = "looptrace.spans.dropped"
DROPPED_DESCRIPTION = "Spans an exporter could not deliver (collector down, queue full)."
SECONDS = "s"
SPANS = "{span}"

QUANTILE = "quantile"  # the attribute (label) naming which quantile a window point is
QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))  # label value, SectionStats field


def section_attributes(path: str, base: dict[str, int]) -> dict[str, str | int]:
    """Return the attributes of a section's points: path, span name, then `base` (the rank).

    A path that cannot be encoded is escaped (see `encodable`), so it never fails a push or
    a scrape.
    """
    path = encodable(path)
    return {PATH: path, SPAN_NAME: path.rsplit(".", 1)[-1], **base}


ITEMS_METRIC = "looptrace.items"
ITEMS_DESCRIPTION = "Units (samples, tokens, ...) a timer counted with count() or iterate(items=)."
ITEMS_RATE_METRIC = "looptrace.items.window.rate"
ITEMS_RATE_DESCRIPTION = "Units per second of wall time over the latest reset() window."
UNIT = "looptrace.unit"  # the attribute naming the unit counted
ITEMS = "{item}"
ITEMS_RATE = "{item}/s"


def item_attributes(path: str, unit: str, base: dict[str, int]) -> dict[str, str | int]:
    """Return the attributes of a timer's count of `unit`: its path, span name, unit, rank."""
    return {**section_attributes(path, base), UNIT: encodable(unit)}


# The job's series, served by one rank (`configure(job_rank=...)`) from `reset(across_ranks=True)`:
# no rank attribute.
JOB_DURATION_METRIC = "looptrace.job.section.duration"
JOB_DURATION_DESCRIPTION = (
    "Duration of timed sections over every rank of the job (the ranks' histograms summed)."
)
JOB_WINDOW_METRIC = "looptrace.job.section.window.duration"
JOB_WINDOW_DESCRIPTION = (
    "The highest of the ranks' exact quantiles of section durations over the latest "
    "cross-rank window the section ran in."
)
STRAGGLER_RANK_METRIC = "looptrace.job.straggler.rank"
STRAGGLER_RANK_DESCRIPTION = "The rank the others waited for in the latest cross-rank window."
STRAGGLER_EXCESS_METRIC = "looptrace.job.straggler.excess"
STRAGGLER_EXCESS_DESCRIPTION = (
    "The straggler's lap time outside wait sections over the typical rank's, latest window."
)
CHRONIC_RANK_METRIC = "looptrace.job.chronic_straggler.rank"
CHRONIC_RANK_DESCRIPTION = "A rank that was the straggler in most recent cross-rank windows."
JOB_ITEMS_RATE_METRIC = "looptrace.job.items.window.rate"
JOB_ITEMS_RATE_DESCRIPTION = (
    "The job's units per second over the latest cross-rank window that counted them: the sum "
    "of the rates of the ranks that counted them."
)
JOB_RANK_RATE_METRIC = "looptrace.job.items.window.rank_rate"
JOB_RANK_RATE_DESCRIPTION = (
    "The lowest and the highest rank's units per second (looptrace.extreme: min, max) over the "
    "latest cross-rank window that counted them."
)
JOB_SLOWEST_RANK_METRIC = "looptrace.job.items.slowest_rank"
JOB_SLOWEST_RANK_DESCRIPTION = (
    "The rank with the fewest units per second in the latest cross-rank window that counted them."
)
EXTREME = "looptrace.extreme"  # the attribute naming which rank's rate a point is: min, max

# Every rank's few series, whether or not it serves its full detail.
RANK_STEPS_METRIC = "looptrace.rank.steps"
RANK_STEPS_DESCRIPTION = "Laps of an outermost timer (steps) this rank completed."
RANK_STEP_METRIC = "looptrace.rank.step.window.duration"
RANK_STEP_DESCRIPTION = "This rank's exact p50 and p99 of its steps over the latest window."
RANK_STEP_QUANTILES = (("0.5", 0), ("0.99", 2))  # label value, index in the window quantiles
RANK_OUTSIDE_WAIT_METRIC = "looptrace.rank.outside_wait"
RANK_OUTSIDE_WAIT_DESCRIPTION = (
    "This rank's lap time outside wait sections: the straggler has the most (or least wait)."
)
STEPS = "{step}"
RANKS = "{rank}"


def job_attributes(path: str, base: dict[str, int]) -> dict[str, str | int]:
    """Return the attributes of the job's points of a section: those of `base` but the rank."""
    return section_attributes(path, {k: v for k, v in base.items() if k != RANK})


def job_item_attributes(path: str, unit: str, base: dict[str, int]) -> dict[str, str | int]:
    """Return the attributes of the job's points of a unit counted: no rank attribute."""
    return item_attributes(path, unit, {k: v for k, v in base.items() if k != RANK})


MEMORY_METRIC = "looptrace.memory.window"
MEMORY_DESCRIPTION = (
    "The process's memory at the latest window's close: host resident (and its peak), and "
    "the CUDA allocator's peak allocated and reserved bytes over the window."
)
MEMORY = "looptrace.memory"  # the attribute naming the figure: host_rss, device_peak_reserved ...
BYTES = "By"
