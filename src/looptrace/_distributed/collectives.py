"""The collectives of cross-rank statistics: `all_reduce`s of vectors over the agreed paths.

Imported only once the program has imported `torch.distributed` (see
`looptrace._distributed.across_ranks`).
"""

from __future__ import annotations

import contextlib
import math
import threading

import torch
import torch.distributed as dist

from looptrace._distributed import detail as _detail
from looptrace._distributed import job_histograms as _job
from looptrace._distributed import job_memory as _memory
from looptrace._distributed import job_rates as _rates
from looptrace._distributed import job_straggler as _straggler
from looptrace._distributed.collective_replay import TRAFFIC
from looptrace._distributed.collective_replay import Wire as _Wire
from looptrace._distributed.job_histograms import Scale
from looptrace._distributed.path_table import PathTable
from looptrace._distributed.window_alignment import WINDOW_BITS, WINDOWS, Misaligned, Skipped
from looptrace._stats.job import JobView
from looptrace._stats.snapshot import Snapshot
from looptrace._stats.spread import SPREAD_STATS, RankSpread, RateSpread, SectionSpread

# TRAFFIC: what the reductions moved (`collective_replay`)
__all__ = ["LISTED", "TRAFFIC", "reduce"]

# Absent (or present) ranks of a path found one per MIN round up to this many; a path with
# more on both sides is settled by one bitmap of the world's ranks instead.
LISTED = 8
_STATS = len(SPREAD_STATS)
_TABLE = PathTable()
_LOCK = threading.Lock()
_Found = _straggler.Found | None
_Memory = dict[str, RankSpread] | None
_Rates = dict[str, dict[str, RateSpread]] | None


def reduce(snapshot: Snapshot, window: int = 0, scale: Scale | None = None) -> Snapshot | None:
    """Return a copy of `snapshot` with `across_ranks`; None without an initialised group.

    `window` is the number of windows of the snapshot's subtree this rank closed. When this
    rank fails between collectives, it still runs the ones the other ranks wait in (see
    `_Wire`) and then raises its error.

    Raises:
        Skipped: the ranks' windows differ, or another rank failed: no rank reduced it.

    """
    if not (dist.is_available() and dist.is_initialized()):
        return None
    scale = Scale() if scale is None else scale
    wire = _Wire(_device(str(dist.get_backend())))
    rank, world = dist.get_rank(), dist.get_world_size()
    with _LOCK:
        table = _TABLE.state()
        try:
            result, found, job, memory, rates = _run(
                snapshot, wire, rank, world, window=window, scale=scale
            )
        except Misaligned as misaligned:
            if window != misaligned.latest:
                WINDOWS.owe(snapshot.subtree, _behind(window, misaligned.latest))
            raise
        except Skipped:
            raise
        except Exception:
            _TABLE.restore(table)
            wire.replay()
            with contextlib.suppress(Exception):  # marked: every rank drops the window
                empty = Snapshot({}, start_ns=0, end_ns=0, rank=rank)
                _run(empty, wire, rank, world, window=window, scale=scale)
            raise
    straggler = None if found is None else found.commit()
    return snapshot.with_spreads(result, straggler, job, memory, rates)


def _behind(window: int, latest: int) -> int:
    """Return how many windows `window` is behind `latest` (the count wraps)."""
    return (latest - window) % (1 << WINDOW_BITS)


def _run(
    snapshot: Snapshot, wire: _Wire, rank: int, world: int, *, window: int, scale: Scale
) -> tuple[dict[str, SectionSpread], _Found, JobView | None, _Memory, _Rates]:
    """Agree on the table, then reduce over it; the collectives depend on agreed data only."""
    rates = snapshot.rates
    units = _rates.counted(rates)
    _TABLE.agree(snapshot, wire.all_reduce, rank=rank, world=world, window=window, units=units)
    held = _memory.Figures.of(snapshot.memory, rank, world) if len(_TABLE) else None
    counted = _rates.Counted.of(rates, _TABLE.units, rank, world)
    return _reduce(snapshot, wire, rank, world, scale, held=held, counted=counted)


def _reduce(
    snapshot: Snapshot,
    wire: _Wire,
    rank: int,
    world: int,
    scale: Scale,
    *,
    held: _memory.Figures | None,
    counted: _rates.Counted,
) -> tuple[dict[str, SectionSpread], _Found, JobView | None, _Memory, _Rates]:
    """Reduce this rank's statistics over the agreed table; every rank gets the same result.

    Each collective also carries a few values per rank (not per path) that name the window's
    straggler (`looptrace._distributed.job_straggler`), choose the ranks that serve detail
    (`looptrace._distributed.detail`) and spread the job's memory
    (`looptrace._distributed.job_memory`), and per path the job's histogram
    (`looptrace._distributed.job_histograms`); a window whose table is empty has none of
    them. Each ends with the values of the units counted (`looptrace._distributed.job_rates`),
    per agreed (path, unit).
    """
    rows = len(_TABLE)
    row_of = {path: _TABLE.index(path) for path in snapshot}
    local, running = _local_values(snapshot, rows, row_of)
    here = torch.tensor(running, dtype=torch.float64)
    has = ~torch.isnan(local)
    mine = _straggler.Mine.of(snapshot, rank, world) if rows else None
    limit = None if scale.detail_ranks == "all" else scale.detail_ranks
    slow = _detail.Slowness(mine.figures if mine else None, limit) if mine else None
    grid = rows * _STATS
    jobs = rows * _job.EXTREMES
    # highest values and highest negated values (lowest values), absent as -inf; the job's
    # highest quantiles and lowest min; the straggler's and the slowness's values
    extremes = torch.cat([local, -local]).where(torch.cat([has, has]), -math.inf).view(-1)
    extremes = _with_tail(
        extremes,
        _job.extremes(snapshot, rows, row_of)
        + (mine.extremes() if mine else [])
        + (slow.extremes() if slow else [])
        + (held.extremes() if held else [])
        + counted.extremes(),
    )
    extremes, rate_extremes = _reduced(wire, extremes, dist.ReduceOp.MAX, counted.extremes_n)
    highest = extremes[:grid].view(rows, _STATS)
    lowest = -extremes[grid : 2 * grid].view(rows, _STATS)
    tail = extremes[2 * grid + jobs :].tolist()
    sums = torch.cat([local.where(has, 0.0), has.double(), here.view(-1, 1)], dim=1).view(-1)
    columns = 2 * _STATS + 1
    binned = slow.sums(tail[:3], tail[3:5]) if slow else []
    sums = _with_tail(
        sums,
        _job.buckets(snapshot, rows, row_of)
        + (mine.sums() if mine else [])
        + binned
        + (held.sums() if held else [])
        + counted.sums(),
    )
    sums, rate_sums = _reduced(wire, sums, dist.ReduceOp.SUM, counted.sums_n)
    after = rows * columns + rows * _job.BUCKETS
    if mine is not None and slow is not None:
        mine.reduced(tail[:3], sums[after : after + 2].tolist())
        slow.counted(sums[after + 2 : after + 2 + len(binned)].tolist())
    # the lowest rank holding the highest value and the lowest value: MAX over negated ranks
    nobody = torch.full_like(local, -float(world))
    slowest_holders = nobody.where(~(has & (local == highest)), -rank)
    fastest_holders = nobody.where(~(has & (local == lowest)), -rank)
    holders = torch.cat([slowest_holders.view(-1), fastest_holders.view(-1)])
    if mine is not None:
        # the straggler's total of every path, -inf from the other ranks
        column = SPREAD_STATS.index("total")
        owns = has[:, column] & mine.straggler
        totals_column = local[:, column].where(owns, -math.inf)
        holders = _with_tail(torch.cat([holders, totals_column]), mine.holders())
    holders = _with_tail(
        holders, (held.holders(tail[5:]) if held else []) + counted.holders(rate_extremes)
    )
    holders, rate_holders = _reduced(wire, holders, dist.ReduceOp.MAX, counted.holders_n)
    totals = sums[: rows * columns].view(rows, columns).tolist()
    ranks = [int(row[-1]) for row in totals]
    absent = _absent(running, ranks, wire, rank, world)
    bounds = (highest.tolist(), lowest.tolist())
    extreme_holders = (
        holders[:grid].view(rows, _STATS).tolist(),
        holders[grid : 2 * grid].view(rows, _STATS).tolist(),
    )
    result = _spreads(bounds, totals, extreme_holders, ranks, absent)
    present = [row for row in range(rows) if ranks[row] > 0]
    found: _Found = None
    if mine is not None:
        found = mine.found(
            _TABLE.names,
            holders[2 * grid : 2 * grid + rows].tolist(),
            [
                row[SPREAD_STATS.index("total")] if n > 0 else math.nan
                for row, n in zip(totals, ranks, strict=True)
            ],
            holders[2 * grid + rows : 2 * grid + rows + 3].tolist(),
        )
    job = _job_view(
        scale, rank, present, (totals, bounds[0]), (extremes, sums), found=found, slow=slow
    )
    _forget_gone(present, counted.present(rate_sums))
    rates = counted.spreads(_TABLE.units, rate_extremes, rate_sums, rate_holders)
    return result, found, job, _memory_of(held, tail[5:], sums, holders), rates


def _memory_of(
    held: _memory.Figures | None, extremes: list[float], sums: torch.Tensor, holders: torch.Tensor
) -> _Memory:
    """Return the spread of the job's memory figures: the reduced values end each tensor."""
    if held is None:
        return None
    return held.spreads(
        extremes,
        sums[len(sums) - _memory.SUMS :].tolist(),
        holders[len(holders) - _memory.HOLDERS :].tolist(),
    )


def _local_values(
    snapshot: Snapshot, rows: int, row_of: dict[str, int]
) -> tuple[torch.Tensor, list[float]]:
    """Return this rank's statistics per row (NaN where absent) and which rows it ran."""
    values = [[math.nan] * _STATS for _ in range(rows)]
    running = [0.0] * rows
    for path, row in row_of.items():
        stats = snapshot[path]
        # an infinite value counts nowhere, as NaN does: +inf and NaN mark a failed rank
        values[row] = [_finite(float(getattr(stats, s))) for s in SPREAD_STATS]
        running[row] = 1.0
    return torch.tensor(values, dtype=torch.float64).view(rows, _STATS), running


def _job_view(
    scale: Scale,
    rank: int,
    present: list[int],
    reduced: tuple[list[list[float]], list[list[float]]],
    collectives: tuple[torch.Tensor, torch.Tensor],
    *,
    found: _Found,
    slow: _detail.Slowness | None,
) -> JobView | None:
    """Return the job's histograms and whether this rank serves detail; None without a table."""
    if slow is None or found is None:
        return None
    totals, highest = reduced
    extremes, sums = collectives
    rows, columns = len(totals), 2 * _STATS + 1
    count, total = SPREAD_STATS.index("count"), SPREAD_STATS.index("total")
    p99, top = SPREAD_STATS.index("p99"), SPREAD_STATS.index("max")
    grid = rows * _STATS
    histograms = _job.histograms(
        _TABLE.names,
        present,
        counts_and_totals=[(row[count], row[total]) for row in totals],
        p99_and_max=[(row[p99], row[top]) for row in highest],
        highest=extremes[2 * grid : 2 * grid + rows * _job.EXTREMES].tolist(),
        summed=sums[rows * columns : rows * columns + rows * _job.BUCKETS].tolist(),
    )
    straggler = found.straggler
    lapped = found.mine.lapped_ranks > 0
    detail = (
        slow.detail(
            rank,
            None if straggler is None else straggler.rank,
            None if straggler is None else straggler.chronic_rank,
        )
        if lapped
        else None
    )
    return _job.view(histograms, serves_job=rank == scale.job_rank, detail=detail)


def _spreads(
    bounds: tuple[list[list[float]], list[list[float]]],
    totals: list[list[float]],
    holders: tuple[list[list[float]], list[list[float]]],
    ranks: list[int],
    absent: dict[int, tuple[int, ...]],
) -> dict[str, SectionSpread]:
    """Return the spread of every path some rank ran, from the reduced values."""
    (top, low), (slowest, fastest) = bounds, holders
    result = {}
    for row in (row for row in range(len(ranks)) if ranks[row] > 0):
        per_stat = {}
        for column, stat in enumerate(SPREAD_STATS):
            total, count = totals[row][column], totals[row][_STATS + column]
            per_stat[stat] = (
                RankSpread(
                    min=low[row][column],
                    max=top[row][column],
                    mean=total / count,
                    slowest_rank=-int(slowest[row][column]),
                    fastest_rank=-int(fastest[row][column]),
                )
                if count > 0
                else RankSpread(math.nan, math.nan, math.nan, None)
            )
        result[_TABLE.names[row]] = SectionSpread(
            ranks=ranks[row], absent=absent.get(row, ()), **per_stat
        )
    return result


def _reduced(
    wire: _Wire, tensor: torch.Tensor, op: dist.ReduceOp.RedOpType, units: int
) -> tuple[torch.Tensor, list[float]]:
    """Reduce `tensor`; return it without its last `units` values (the rates'), and those."""
    wire.all_reduce(tensor, op)
    cut = len(tensor) - units
    return tensor[:cut], tensor[cut:].tolist()


def _forget_gone(paths: list[int], units: list[int]) -> None:
    """Forget the paths and units gone from every rank, alike, once they are many."""
    if len(_TABLE) > 2 * len(paths) + 64 or len(_TABLE.units) > 2 * len(units) + 64:
        _TABLE.keep(paths, units)


def _with_tail(grid: torch.Tensor, tail: list[float]) -> torch.Tensor:
    """Return `grid` (flat) with `tail` appended: the per-rank values of a collective."""
    return torch.cat([grid, torch.tensor(tail, dtype=torch.float64)]) if tail else grid


def _finite(value: float) -> float:
    return value if math.isfinite(value) else math.nan


def _absent(
    here: list[float], ranks: list[int], wire: _Wire, rank: int, world: int
) -> dict[int, tuple[int, ...]]:
    """Return the absent ranks of every row that some, not all, ranks ran.

    The smaller side (absent or present ranks) is found one rank per MIN round while it has at
    most `LISTED` ranks, so the bytes do not depend on the world size; rows with more on both
    sides share one bitmap of the world's ranks.
    """
    side: dict[int, bool] = {}  # row -> list the absent ranks (else the present ones)
    few: list[int] = []
    many: list[int] = []
    for row, n in enumerate(ranks):
        if 0 < n < world:
            side[row] = world - n <= n
            (few if min(n, world - n) <= LISTED else many).append(row)
    found: dict[int, list[int]] = {row: [] for row in side}
    mine = {row: bool(here[row]) != side[row] for row in side}  # this rank is on the listed side
    pending = few
    while pending:
        wanted = torch.tensor(
            [-rank if mine[row] and rank not in found[row] else -world for row in pending],
            dtype=torch.float64,
        )
        wire.all_reduce(wanted, dist.ReduceOp.MAX)
        for row, value in zip(pending, wanted.tolist(), strict=True):
            found[row].append(-int(value))
        pending = [row for row in pending if len(found[row]) < min(ranks[row], world - ranks[row])]
    if many:
        bits = torch.zeros((len(many), (world + 7) // 8), dtype=torch.uint8)
        for i, row in enumerate(many):
            if mine[row]:
                bits[i, rank // 8] = 1 << (rank % 8)
        wire.all_reduce(bits, dist.ReduceOp.SUM)  # one writer per bit: the sum is the union
        for i, row in enumerate(many):
            flags = bits[i].tolist()
            found[row] = [r for r in range(world) if flags[r // 8] >> (r % 8) & 1]
    absent = {}
    for row, listed in found.items():
        absent[row] = tuple(sorted(listed)) if side[row] else _others(listed, world)
    return absent


def _others(ranks: list[int], world: int) -> tuple[int, ...]:
    chosen = set(ranks)
    return tuple(r for r in range(world) if r not in chosen)


def _device(backend: str) -> torch.device:
    """Return where the backend's collectives take tensors: CPU for gloo and MPI, else CUDA."""
    if "gloo" in backend or backend == "mpi":
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())
