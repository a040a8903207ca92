"""Per-section statistics of one reset window, and the read-only snapshot that holds them."""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from looptrace._stats.buckets import BOUNDARIES_S
from looptrace._stats.job import JobView
from looptrace._stats.memory import WindowMemory
from looptrace._stats.partial import partial_window
from looptrace._stats.rate_metrics import rate_metrics, rate_spread_metrics, rates_dict
from looptrace._stats.rates import Flops, Rate, flops_of, rates_of, sum_counts
from looptrace._stats.roles import Roles
from looptrace._stats.spread import RankSpread, RateSpread, SectionSpread
from looptrace._stats.straggler import Straggler, straggler_metrics
from looptrace._stats.system_figures import WindowSystem
from looptrace._stats.tally import Tally
from looptrace._stats.thresholds import DEFAULTS

if TYPE_CHECKING:
    from looptrace._diagnosis.finding import Finding
    from looptrace._diagnosis.history import Past
    from looptrace._stats.hang import StandingHang

# The statistics `as_metrics()` flattens, in this order.
METRIC_STATS = ("count", "total", "mean", "min", "max", "std", "p50", "p90", "p99", "self_time")


@dataclass(frozen=True, slots=True)
class SectionStats:
    """Statistics of one section path over one window; every duration is in seconds.

    `self_time` is the total exclusive time (duration minus the time of direct children);
    `buckets` counts durations per explicit boundary of `BOUNDARIES_S`, plus one overflow
    bucket, exactly as the histogram metric reports them.
    """

    count: int
    total: float
    mean: float
    min: float
    max: float
    std: float
    p50: float
    p90: float
    p99: float
    self_time: float
    errors: int
    buckets: tuple[int, ...]

    @classmethod
    def empty(
        cls,
        total: float = math.nan,
        self_time: float = math.nan,
        errors: int = 0,
        buckets: tuple[int, ...] = (),
    ) -> SectionStats:
        """Return the statistics of a path none of whose intervals ended: NaN but the times."""
        nan = math.nan
        return cls(0, total, nan, nan, nan, nan, nan, nan, nan, self_time, errors, buckets)

    def to_dict(self) -> dict[str, float | int | list[int]]:
        """Return the statistics as a plain dict (buckets as a list)."""
        data = asdict(self)
        data["buckets"] = list(self.buckets)
        return data


class StatsSource(Protocol):
    """A path's aggregate that computes its `SectionStats` when first asked."""

    def stats(self) -> SectionStats:
        """Return the path's statistics."""
        ...

    def distribution(self) -> list[tuple[float, int]]:
        """Return the path's durations as `(value_ns, count)` pairs (see the aggregator)."""
        ...


class Snapshot(Mapping[str, SectionStats]):
    """Statistics per section path since the previous `reset()`; a read-only mapping.

    The mapping holds this rank's statistics. `step` is the lap index of the outermost timer
    at the cut (the laps it completed before it; with several outermost timers in the thread
    that cut, the largest), for a logger's step axis; None when no timer was lapped.
    `across_ranks` holds, per path of any rank, how they spread over the ranks of the job
    when the window was reduced by `reset(across_ranks=True)`; it is None when the snapshot
    holds this rank's data only (not asked for, or no initialised `torch.distributed` process
    group). `subtree` is the path of the timer whose window this is: `"root"` for
    `lt.reset()`, e.g. `"root.training"` for `training.reset()`.

    `steps` is the range of the steps (outermost lap indices) the window holds time of, first
    to last: `range(50, 100)` for steps 50 to 99. A `reset()` in the middle of a step splits
    that step: the part before the cut is in the closing window, whose range ends with it, and
    the rest in the next window, whose range starts with it; its lap is counted once, in the
    window where it ends. Empty when no lap ran in the window; None when no timer was lapped.

    `roles` says which sections play which role (`configure(roles=..., wait_sections=...)`),
    `limits` holds the diagnosis's thresholds, and `straggler` the rank the others waited for
    in a cross-rank window (None otherwise). `job` holds the job's histograms (summed over
    the ranks) and which ranks serve which metrics (`JobView`) in a cross-rank window.

    `rates` holds the units timers counted in the window (`Timer.count`), as `Rate`s per
    path and unit; `flops` is what their MFU is computed from (`configure(peak_flops=...,
    flops_per_unit=...)`: none by default, so no MFU). `memory` is the process's memory at
    the close (`WindowMemory`) for the windows of every timer (`lt.reset()`, `shutdown()`);
    None for a timer's own window. In a cross-rank window `memory_across_ranks` holds, per
    figure some rank measured (`host_rss`, `host_peak_rss`, `device_peak_allocated`,
    `device_peak_reserved`), its `RankSpread` over the ranks that measured it (min, max, mean,
    `slowest_rank`: the rank holding the most, `fastest_rank`: the least); None otherwise.
    Likewise `rates_across_ranks[path][unit]` holds, per unit some rank counted, its
    `RateSpread`: the job's units and units per second (the sums over the ranks that
    counted it), the lowest and highest rank's rate and which ranks hold them
    (`slowest_rank`: the least); None outside a cross-rank window.
    `past` is what the live looptrace kept of the run before the window (`Past`: memory
    since the warm-up, earlier rates), for the diagnosis's memory creep and throughput drop;
    None where nothing was kept (a snapshot made elsewhere).

    `overhead` is the time, in seconds, looptrace spent in its own `reset()` work during the
    window (closing the previous window: the cross-rank reduce, the outputs, the `on_reset`
    hooks). The thread that called `reset()` has it taken out of its running laps, so it is in
    no lap's time, self time or duration; it is reported here so that its cost stays visible.
    """

    __slots__ = (
        "__weakref__",  # a later window's `Past` refers to it weakly
        "_counts",
        "_kept",
        "_lock",
        "_more",
        "_rates",
        "_sorted",
        "_stats",
        "across_ranks",
        "end_ns",
        "flops",
        "hang",
        "job",
        "limits",
        "memory",
        "memory_across_ranks",
        "overhead",
        "past",
        "rank",
        "rates_across_ranks",
        "roles",
        "start_ns",
        "step",
        "steps",
        "straggler",
        "subtree",
        "system",
    )

    boundaries: tuple[float, ...] = BOUNDARIES_S

    def __init__(
        self,
        stats: Mapping[str, SectionStats | StatsSource],
        *,
        start_ns: int,
        end_ns: int,
        rank: int,
        across_ranks: Mapping[str, SectionSpread] | None = None,
        step: int | None = None,
        steps: range | None = None,
        subtree: str = "root",
        more: Callable[[dict[str, SectionStats | StatsSource]], None] | None = None,
        keep_distributions: bool = False,
        counts: Iterable[Mapping[tuple[str, str], Tally]] = (),
        memory: WindowMemory | None = None,
    ) -> None:
        # `reset()` hands over what it measured as it is: `more` adds to `stats` in place (the
        # timers' logs, grouped by path) before anything is read, a path's statistics are
        # computed when first read, and the paths sorted when first iterated, off the training
        # loop's clock when nobody reads them there.
        self._stats: dict[str, SectionStats | StatsSource] = dict(stats)
        self._more = more
        self._sorted = False
        self._lock = threading.Lock()  # a path's statistics are computed by one thread, once
        # With `keep_distributions`, a path's source outlives its statistics until
        # `release_distributions()`: the exponential histograms read its durations off the
        # training thread, whoever read the statistics first.
        self._kept: dict[str, StatsSource] | None = {} if keep_distributions else None
        self.subtree = subtree
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.rank = rank
        self.step = step
        self.steps = steps
        self.across_ranks: Mapping[str, SectionSpread] | None = (
            None if across_ranks is None else MappingProxyType(dict(sorted(across_ranks.items())))
        )
        self.roles = Roles()
        self.limits: Mapping[str, float] = DEFAULTS
        self.straggler: Straggler | None = None
        self.job: JobView | None = None
        # Units counted by (path, unit), per thread as handed over; summed when first read.
        self._counts: list[Mapping[tuple[str, str], Tally]] = list(counts)
        self._rates: Mapping[str, Mapping[str, Rate]] | None = None
        self.flops = Flops()
        # The process's memory at the window's close (None: not read, e.g. a file's window).
        self.memory = memory
        # How the memory figures spread over the ranks (`reset(across_ranks=True)`; else None).
        self.memory_across_ranks: Mapping[str, RankSpread] | None = None
        # How the units counted spread over the ranks (`reset(across_ranks=True)`; else None).
        self.rates_across_ranks: Mapping[str, Mapping[str, RateSpread]] | None = None
        # The run before this window, as the live looptrace kept it (None: not kept).
        self.past: Past | None = None
        # A step of this rank hung and still open at the close (None: none; see `_stats.hang`).
        self.hang: StandingHang | None = None
        # Seconds looptrace spent in its own `reset()` work in the window, kept out of laps.
        self.overhead = 0.0
        # The system figures sampled in the window (None: no sampler, e.g. `sample_system`).
        self.system: WindowSystem | None = None

    def handed_counts(self) -> list[Mapping[tuple[str, str], Tally]]:
        """Return the units counted in the window by (path, unit), per thread as handed over."""
        return self._counts

    @property
    def rates(self) -> Mapping[str, Mapping[str, Rate]]:
        """Return the window's throughput: `{timer path: {unit: Rate}}`, read-only.

        A timer's units are what `Timer.count()` (or `iterate(items=...)`) added in the
        window, on any thread; a count lands in the window open when it is made. Empty when
        nothing was counted. In a `partial` window the per-lap rates are NaN.
        """
        rates = self._rates
        if rates is None:
            totals = sum_counts(self._counts)
            window_s = (self.end_ns - self.start_ns) / 1e9
            peak = self.flops.peak
            costs = flops_of(self._counts, self.flops.per_unit) if totals and peak else None
            times: Mapping[str, SectionStats] = self if totals and not self.partial else {}
            rates = rates_of(totals, times, window_s, costs, peak)
            self._rates = rates
        return rates

    @property
    def partial(self) -> bool:
        """Whether the window holds no whole lap, only parts of laps (`partial_window`)."""
        return partial_window(self)

    def _ready(self) -> None:
        """Add what `reset()` handed over ungrouped, once, before anything is read."""
        if self._more is not None:
            with self._lock:
                more = self._more
                if more is not None:
                    more(self._stats)
                    self._more = None

    def __getitem__(self, path: str) -> SectionStats:
        self._ready()
        value = self._stats[path]
        if isinstance(value, SectionStats):
            return value
        with self._lock:
            value = self._stats[path]
            if not isinstance(value, SectionStats):
                if self._kept is not None:
                    self._kept[path] = value
                value = self._stats[path] = value.stats()
        return value

    def distribution(self, path: str) -> list[tuple[float, int]] | None:
        """Return the durations of `path` in nanoseconds as `(value, count)` pairs.

        Exact up to 1,023 intervals of the path in the window, its sketch's buckets (within
        1 %) beyond. None when they are not kept: statistics made elsewhere (a file, a
        test), or read before and not kept (see `keep_distributions`).
        """
        self._ready()
        with self._lock:
            value = self._stats.get(path)
            if isinstance(value, SectionStats):
                value = None if self._kept is None else self._kept.get(path)
            return None if value is None else value.distribution()

    def release_distributions(self) -> None:
        """Stop keeping the paths' durations once their statistics are read."""
        with self._lock:
            if self._kept is not None:
                self._kept.clear()  # shared with copies (`with_spreads`)
                self._kept = None

    def __contains__(self, path: object) -> bool:
        self._ready()
        return path in self._stats

    def __iter__(self) -> Iterator[str]:
        self._ready()
        if not self._sorted:
            with self._lock:
                self._stats = dict(sorted(self._stats.items()))
                self._sorted = True
        return iter(self._stats)

    def __len__(self) -> int:
        self._ready()
        return len(self._stats)

    def __repr__(self) -> str:
        return f"Snapshot({len(self)} paths of {self.subtree}, rank {self.rank})"

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Return `{path: {stat: value}}` as plain data.

        With cross-rank data, one more key, `"across_ranks"`, holds
        `{path: {"ranks": n, "absent": [...], stat: {min, max, mean, slowest_rank}}}`; with
        units counted, `"rates"` holds `{path: {unit: {total, per_s, per_lap_s, per_lap}}}`
        (and `mfu` where it is known), and in a cross-rank window where some rank counted,
        `"rates_across_ranks"` holds `{path: {unit: RateSpread as a dict}}`.
        """
        data: dict[str, dict[str, Any]] = {path: stats.to_dict() for path, stats in self.items()}
        if self.across_ranks is not None:
            data["across_ranks"] = {
                path: spread.to_dict() for path, spread in self.across_ranks.items()
            }
        if self.rates:
            data["rates"] = rates_dict(self.rates)
        if self.rates_across_ranks:
            data["rates_across_ranks"] = rates_dict(self.rates_across_ranks)
        return data

    def as_metrics(
        self,
        prefix: str = "timing",
        stats: Iterable[str] = METRIC_STATS,
        sep: str = ".",
        *,
        memory: bool = False,
        system: bool = False,
    ) -> dict[str, float]:
        """Return flat `{prefix}.{path}.{stat}` metrics for an experiment logger.

        `stats` chooses the statistics (any of `METRIC_STATS`, in that order) and `sep` joins
        the prefix, the path's levels and the statistic (`sep="/"` groups panels in W&B and
        TensorBoard). With another `sep` than `"."`, a `%` or a character of `sep` inside a
        section name is percent-encoded (`%25`, `/` as `%2F`), so distinct paths always give
        distinct keys: `root.t.a/b` is `timing/root/t/a%2Fb/total`, `root.t.a.b` is
        `timing/root/t/a/b/total`. With cross-rank data, every path of any rank adds
        `{prefix}.{path}.ranks` and `{prefix}.{path}.{stat}.min_rank`, `.max_rank`,
        `.mean_rank` and `.slowest_rank` for each chosen statistic of `SPREAD_STATS`.
        Statistics that are undefined for a window (NaN) are left out, since most loggers
        reject them. Every unit a timer counted (`Snapshot.rates`) adds `{prefix}.{path}.{unit}`
        (the total) and `.{unit}_per_s`, `.{unit}_per_lap_s`, `.{unit}_per_lap`
        (`timing.root.train.tokens_per_s`), and `.{unit}_mfu` where the MFU is known; in a
        cross-rank window `.{unit}.job` (the job's units), `.{unit}.job_ranks` (the ranks that
        counted them), `.{unit}_per_s.job` (the job's units per second) and
        `.{unit}_per_s.min_rank`, `.max_rank`, `.mean_rank`, `.slowest_rank` (the rank with the
        least) and `.fastest_rank` (see `RateSpread`). With
        `memory=True` the window's measured memory figures (`Snapshot.memory`) are added as
        `{prefix}.memory.{figure}` (`timing.memory.device_peak_allocated_bytes`), and in a
        cross-rank window their spread as `{prefix}.memory.{figure}.max_rank`, `.min_rank`,
        `.mean_rank`, `.slowest_rank` (the rank holding the most) and `.fastest_rank`.
        A window that names a straggler (by its wait sections) adds `{prefix}.straggler.rank`,
        `.excess_s`, `.share` and `.streak`, `{prefix}.straggler.chronic_rank` and
        `.chronic_count` when one is chronic, and `{prefix}.{cause path}.straggler_excess_s`.
        With `system=True` the window's system figures (`Snapshot.system`) are added as
        `{prefix}.system.{figure}.mean` and `.max` (`timing.system.host_cpu_percent.max`).

        Raises:
            ValueError: a statistic that is not one of `METRIC_STATS`, or a `sep` that is empty
                or holds `%`, an ASCII letter or a digit (the characters of an escape).

        """
        chosen = _chosen(stats)
        levels = path_levels(sep)
        head = f"{prefix}{sep}" if prefix else ""
        flat: dict[str, float] = {}
        for path, section in self.items():
            name = f"{head}{levels(path)}{sep}"
            for stat in chosen:
                value = float(getattr(section, stat))
                if not math.isnan(value):
                    flat[f"{name}{stat}"] = value
        if self.across_ranks is not None:
            for path, spread in self.across_ranks.items():
                name = f"{head}{levels(path)}"
                for key, value in spread.metrics("").items():
                    parts = key[1:].split(".")
                    if parts[0] == "ranks" or parts[0] in chosen:
                        flat[sep.join((name, *parts))] = value
        flat.update(rate_metrics(self.rates, head, sep, levels))
        flat.update(rate_spread_metrics(self.rates_across_ranks or {}, head, sep, levels))
        flat.update(straggler_metrics(self.straggler, head, sep, levels))
        if memory and self.memory is not None:
            for key, value in self.memory.metrics().items():
                flat[f"{head}memory{sep}{key}"] = value
        if memory and self.memory_across_ranks is not None:
            for figure, figure_spread in self.memory_across_ranks.items():
                for key, value in figure_spread.metrics("").items():
                    flat[sep.join((f"{head}memory", f"{figure}_bytes", key[1:]))] = value
        flat.update(_system_metrics(self.system if system else None, head, sep))
        return flat

    def with_spreads(
        self,
        across_ranks: Mapping[str, SectionSpread],
        straggler: Straggler | None = None,
        job: JobView | None = None,
        memory: Mapping[str, RankSpread] | None = None,
        rates: Mapping[str, Mapping[str, RateSpread]] | None = None,
    ) -> Snapshot:
        """Return a copy of this snapshot that carries cross-rank data."""
        self._ready()  # the copy shares the statistics
        reduced = copy.copy(self)
        reduced.across_ranks = MappingProxyType(dict(sorted(across_ranks.items())))
        reduced.straggler = straggler
        reduced.job = job
        reduced.memory_across_ranks = None if memory is None else MappingProxyType(dict(memory))
        reduced.rates_across_ranks = MappingProxyType(
            {
                path: MappingProxyType(dict(sorted(units.items())))
                for path, units in sorted((rates or {}).items())
            }
        )
        return reduced

    def diagnosis(self, *, min_severity: str = "warning", **overrides: float) -> list[Finding]:
        """Return what is slow and why, most severe first (each kind: docs/answers.md).

        Each finding has a `kind`, a `severity` (`"critical"`, `"warning"`, `"info"`), the
        `path` and `rank` concerned (or None), a one-line `message` with the numbers, an
        `action` to try and its `evidence`. Only warnings and worse by default: a healthy
        window gives an empty list. `min_severity="info"` adds the rest: findings below their
        warning threshold, and the abstentions of checks whose input the window lacks ("no
        `data` section: input wait not measured"). `overrides` replace thresholds by name
        (`input_bound_warning=0.05`).

        Raises:
            ValueError: an unknown threshold, a value it cannot take, or an unknown severity.

        """
        # The diagnosis is the layer above the statistics: imported on the first call, the one
        # import of a layer above (docs/architecture.md, the contract in pyproject.toml).
        from looptrace._diagnosis.diagnosis import findings_of  # noqa: PLC0415

        return findings_of(self, min_severity, overrides)


def _system_metrics(system: WindowSystem | None, head: str, sep: str) -> dict[str, float]:
    """Return `{head}system{sep}{figure}{sep}mean` and `max` of each figure (none: {})."""
    if system is None:
        return {}
    return {
        sep.join((f"{head}system", *key.split("."))): value
        for key, value in system.metrics().items()
    }


def _chosen(stats: Iterable[str]) -> tuple[str, ...]:
    """Return the chosen statistics in `METRIC_STATS` order, or name the unknown ones."""
    if isinstance(stats, str):
        stats = (stats,)
    wanted = set(stats)
    unknown = sorted(wanted - set(METRIC_STATS))
    if unknown:
        raise ValueError(
            f"as_metrics(stats=...): unknown statistic(s) {', '.join(map(repr, unknown))}; "
            f"choose from {', '.join(METRIC_STATS)}"
        )
    return tuple(stat for stat in METRIC_STATS if stat in wanted)


def path_levels(sep: str) -> Callable[[str], str]:
    """Return the function writing a path's levels joined by `sep`, each escaped for it.

    With `sep="."` a path is written as it is. Otherwise `%` and every character of `sep`
    inside a level become their UTF-8 bytes as `%XX` (percent-encoding), so no level holds
    a character of `sep` and the keys of distinct paths differ.
    """
    if not sep:
        raise ValueError("as_metrics(sep=...) must not be empty")
    if any(c == "%" or (c.isascii() and c.isalnum()) for c in sep):
        raise ValueError(
            f"as_metrics(sep={sep!r}): a separator must not hold '%', ASCII letters or digits, "
            "which escape the separator inside section names"
        )
    if sep == ".":
        return str
    escapes = {
        ord(c): "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
        for c in {*sep, "%"}
    }

    def levels(path: str) -> str:
        return sep.join(level.translate(escapes) for level in path.split("."))

    return levels
