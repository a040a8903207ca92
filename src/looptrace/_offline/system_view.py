"""The system figures of snapshot windows, as the offline views show them.

The sampler (`looptrace.integrations.system`) gives each window, per figure, the mean and the
max of its readings and how many there were. Over several windows a figure's mean is the mean
of every reading (each window's mean weighted by its samples) and its max the largest; per rank
likewise. `looptrace summary` and `looptrace run` print `system_block`, `looptrace watch` shows
`system_line` of the latest windows, and `looptrace report` draws `system_series`.

Percent figures read as `93%`, byte figures in binary units (`1.2 GiB`), others as numbers;
every name from a file is escaped as the table's paths are (`text.escaped`).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from looptrace._base.units import format_bytes
from looptrace._offline.text import escaped
from looptrace._offline.window_fold import ExactSum
from looptrace._offline.window_records import Window
from looptrace._stats.system_figures import FigureStats

PROCESS_CPU = "process_cpu_percent"
HOST_CPU = "host_cpu_percent"
RSS = "host_rss_bytes"
AVAILABLE = "host_available_bytes"
_FIRST = (PROCESS_CPU, HOST_CPU, RSS, AVAILABLE)  # then the GPUs and the rest, by name
GPU_UTILIZATION = re.compile(r"gpu(\d+)_utilization_percent")
NOTE = "mean and max of every sample"
RANKS_NOTE = "; rank min / rank max: the lowest and highest rank's mean"


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure over windows: its mean over every sample, its max, and per rank the same."""

    name: str
    mean: float
    max: float
    samples: int
    ranks: dict[int, FigureStats]  # per rank: the mean and max of its windows' samples


def figures(windows: Iterable[Window]) -> list[Figure]:
    """Return every system figure of the windows, in the order the views show them."""
    fold = SystemFold()
    for window in windows:
        fold.add(window)
    return fold.figures()


class _RankFigure:
    """One figure of one rank's windows: its samples' sum (exact), their count, the max."""

    __slots__ = ("high", "samples", "summed")

    def __init__(self) -> None:
        self.summed = ExactSum()
        self.samples = 0
        self.high = -math.inf

    def stats(self) -> FigureStats:
        return FigureStats(self.summed.value() / self.samples, self.high, self.samples)


class SystemFold:
    """`figures` window by window: per figure and rank, bounded by figures times ranks."""

    def __init__(self) -> None:
        """Hold no window yet."""
        self._found: dict[str, dict[int, _RankFigure]] = defaultdict(dict)

    def add(self, window: Window) -> None:
        """Add one window's system figures."""
        for name, stats in (window.system or {}).items():
            ranks = self._found[name]
            fold = ranks.get(window.rank)
            if fold is None:
                fold = ranks[window.rank] = _RankFigure()
            fold.summed.add(stats.mean * stats.samples)
            fold.samples += stats.samples
            fold.high = max(fold.high, stats.max)

    def figures(self) -> list[Figure]:
        """Return the figures of the windows added, in the order the views show them."""
        found = []
        for name in sorted(self._found, key=figure_order):
            ranks = {rank: fold.stats() for rank, fold in sorted(self._found[name].items())}
            whole = _combined(ranks.values())
            found.append(Figure(name, whole.mean, whole.max, whole.samples, ranks))
        return found


def figure_order(name: str) -> tuple[int, tuple[tuple[int, str], ...]]:
    """Return a figure's place: CPU and memory, the GPUs, the rest; by name, numbers in order."""
    if name in _FIRST:
        first = _FIRST.index(name)
    else:
        first = len(_FIRST) + (0 if name.startswith("gpu") else 1)
    parts = re.split(r"(\d+)", name)
    return first, tuple((int(p), "") if p.isdigit() else (-1, p) for p in parts if p)


def _combined(parts: Iterable[FigureStats]) -> FigureStats:
    """Return the mean of the samples of several windows (weighted by samples) and their max."""
    parts = list(parts)
    samples = sum(part.samples for part in parts)
    mean = math.fsum(part.mean * part.samples for part in parts) / samples
    return FigureStats(mean, max(part.max for part in parts), samples)


def format_figure(name: str, value: float) -> str:
    """Return a figure's value in its unit: `93%`, `1.2 GiB`, or a number (`71.5`)."""
    if name.endswith("_percent"):
        return f"{value:.0f}%" if abs(value) >= 100 else f"{value:.3g}%"
    if name.endswith("_bytes"):
        return format_bytes(value)
    return f"{value:.4g}"


def system_block(windows: Iterable[Window]) -> list[str]:
    """Return the lines of the system figures of the windows; none when no window has any."""
    return figures_block(figures(windows))


def figures_block(found: Sequence[Figure]) -> list[str]:
    """Return the lines of system figures (`figures`); none when there are none.

    Per figure the mean over every sample and the max; with several ranks the lowest and the
    highest rank's mean, naming the rank (the lowest-numbered one on a tie).
    """
    if not found:
        return []
    ranks = sorted({rank for figure in found for rank in figure.ranks})
    several = len(ranks) > 1
    head = ["figure", "mean", "max", *(["rank min", "rank max"] if several else [])]
    rows = [head]
    for figure in found:
        row = [
            escaped(figure.name),
            format_figure(figure.name, figure.mean),
            format_figure(figure.name, figure.max),
        ]
        if several:
            means = {rank: stats.mean for rank, stats in figure.ranks.items()}
            low = min(means, key=lambda rank: (means[rank], rank))
            high = max(means, key=lambda rank: (means[rank], -rank))
            row += [
                f"{format_figure(figure.name, means[low])} (rank {low})",
                f"{format_figure(figure.name, means[high])} (rank {high})",
            ]
        rows.append(row)
    widths = [max(len(row[column]) for row in rows) for column in range(len(head))]
    lines = [
        "  "
        + "  ".join(
            cell.ljust(width) if column == 0 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    described = f"{len(ranks)} ranks" if several else f"rank {ranks[0]}"
    return [f"system, {described} ({NOTE}{RANKS_NOTE if several else ''}):", *lines]


def system_line(windows: Sequence[Window]) -> str | None:
    """Return one line of the CPU, memory and GPU figures of the windows (a rank's latest each).

    `system: cpu 93% (host 97%) · rss 1.2 GiB (30.5 GiB available) · gpu0 41% (9.8 GiB)`: the
    process's CPU and resident memory, the host's CPU and available memory, each GPU's
    utilisation and memory used; with several ranks each figure is the mean of the means of
    the ranks that have it. None: no figure to show.
    """
    found = {figure.name: _rank_mean(figure) for figure in figures(windows)}
    parts = []
    if PROCESS_CPU in found:
        cpu = f"cpu {format_figure(PROCESS_CPU, found[PROCESS_CPU])}"
        if HOST_CPU in found:
            cpu += f" (host {format_figure(HOST_CPU, found[HOST_CPU])})"
        parts.append(cpu)
    elif HOST_CPU in found:
        parts.append(f"host cpu {format_figure(HOST_CPU, found[HOST_CPU])}")
    if RSS in found:
        memory = f"rss {format_bytes(found[RSS])}"
        if AVAILABLE in found:
            memory += f" ({format_bytes(found[AVAILABLE])} available)"
        parts.append(memory)
    for name, mean in found.items():
        match = GPU_UTILIZATION.fullmatch(name)
        if match is None:
            continue
        used = found.get(f"gpu{match[1]}_memory_used_bytes")
        memory = "" if used is None else f" ({format_bytes(used)})"
        parts.append(f"gpu{match[1]} {format_figure(name, mean)}{memory}")
    if not parts:
        return None
    ranks = {window.rank for window in windows if window.system}
    which = f" (mean of {len(ranks)} ranks)" if len(ranks) > 1 else ""
    return f"system{which}: " + " · ".join(parts)


def _rank_mean(figure: Figure) -> float:
    """Return the mean of the ranks' means of a figure."""
    return math.fsum(stats.mean for stats in figure.ranks.values()) / len(figure.ranks)


def window_x(window: Window, index: int) -> int:
    """Return where a window sits on the step axis: the step it closed at, else its index."""
    return index if window.step is None else window.step


@dataclass(frozen=True, slots=True)
class SystemSeries:
    """The system figures of a run's windows: per figure and rank, and as points over steps."""

    figures: list[Figure]
    cpu: dict[str, list[tuple[int, float]]]  # per rank ("rank 0"): (step, process CPU mean)
    gpu: dict[str, list[tuple[int, float]]]  # per rank and device ("rank 0 gpu1"): utilisation


def system_series(windows: Sequence[Window]) -> SystemSeries | None:
    """Return the system figures of the windows and their series; None when no window has any."""
    found = figures(windows)
    if not found:
        return None
    cpu: dict[int, list[tuple[int, float]]] = defaultdict(list)
    gpu: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
    for index, window in enumerate(windows):
        for name, stats in (window.system or {}).items():
            match = GPU_UTILIZATION.fullmatch(name)
            if name == PROCESS_CPU:
                cpu[window.rank].append((window_x(window, index), stats.mean))
            elif match is not None:
                gpu[window.rank, int(match[1])].append((window_x(window, index), stats.mean))
    return SystemSeries(
        figures=found,
        cpu={f"rank {rank}": sorted(points) for rank, points in sorted(cpu.items())},
        gpu={
            f"rank {rank} gpu{device}": sorted(points)
            for (rank, device), points in sorted(gpu.items())
        },
    )
