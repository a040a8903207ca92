"""Cross-rank statistics: one window's snapshot reduced over the ranks of `torch.distributed`.

Every rank runs the same `all_reduce`s in the same order, whatever paths it has, so ranks that
timed different sections never wait on each other, and no rank receives another's data:

1. the ranks agree on a table of paths (`looptrace._distributed.path_table`): a 32-byte header each
   window, and only when some rank has paths the table lacks, a hashed slot vector and the
   new names themselves;
2. over that table, one MAX of every statistic and its negation (highest and lowest value),
   one SUM of the values, the ranks holding each one and the ranks running each path, and
   one MAX of the negated ranks holding each highest value and each lowest value (the
   slowest and the fastest rank, the lowest on a tie); the same three collectives carry the
   job's histogram of every path (`looptrace._distributed.job_histograms`) and a few values
   per rank that name the window's straggler (`looptrace._distributed.job_straggler`), the
   ranks that serve their full detail (`looptrace._distributed.detail`), the spread of the
   memory figures (`looptrace._distributed.job_memory`) and, per (timer path, unit)
   counted, the job's throughput (`looptrace._distributed.job_rates`);
3. for a path that some but not all ranks ran, the smaller side is named one rank per round
   while it has at most `LISTED` ranks, else by one bitmap of the world's ranks.

The header also carries the number of windows the subtree closed on each rank, so that ranks
whose reduces close different windows skip that reduce alike and realign
(`looptrace._distributed.window_alignment`); and a rank that fails between two collectives
still runs the ones the others wait in, with values that make every rank drop the window
(`looptrace._distributed.collective_replay`), so a failed reduce leaves every rank able to
run the next one.

Steps 1 and 2 move `816 + 704 x paths + 56 x units` bytes per rank in a window with no new
path or unit (a (timer path, unit) pair counted, agreed in the table as paths are), whatever
the world size (`looptrace._distributed.collectives.TRAFFIC` counts them). torch is
imported only when the program has imported `torch.distributed` already, so looptrace works,
and imports fast, without torch.
"""

from __future__ import annotations

import functools
import logging
import sys

from looptrace._distributed.job_histograms import Scale
from looptrace._distributed.window_alignment import WINDOWS, Skipped
from looptrace._stats.health import Incidents
from looptrace._stats.snapshot import Snapshot

_log = logging.getLogger("looptrace")


def reduce_or_keep(
    snapshot: Snapshot, incidents: Incidents, *, reduce: bool = True, scale: Scale | None = None
) -> Snapshot:
    """Count the window `snapshot` closes; return it reduced across ranks when `reduce`.

    Never raises into the caller. Without an initialised process group the snapshot comes
    back unchanged, its `across_ranks` None (logged once at INFO). When the ranks' reduces
    close different windows, or a rank fails during one, every rank keeps its local snapshot
    for that window (a warning) and the next reduce works on every rank; a failure of this
    rank is counted in `internal_errors`.
    """
    window = WINDOWS.close(snapshot.subtree)
    if not reduce:
        return snapshot
    if WINDOWS.take_owed(snapshot.subtree):  # realigning: the other ranks are a window ahead
        return snapshot
    try:
        return reduce_across_ranks(snapshot, window, scale)
    except Skipped as why:
        _log.warning("looptrace: %s", why)
        return snapshot
    except Exception:
        incidents.failed("reset(across_ranks=True)")
        return snapshot


def reduce_across_ranks(
    snapshot: Snapshot, window: int = 0, scale: Scale | None = None
) -> Snapshot:
    """Return a copy of `snapshot` whose `across_ranks` holds the spread of every path.

    A collective: every rank of `torch.distributed`'s default group must call it at the same
    point, with the same `window` (the number of windows of its subtree it closed) and the
    same `scale` (which ranks serve which metrics). Without an initialised group it returns
    `snapshot` itself.

    Raises:
        Skipped: the ranks' windows differ, or another rank failed in this reduce: no rank
            reduced this window.

    """
    if "torch.distributed" not in sys.modules:  # nobody can have initialised a group
        return _local(snapshot)
    from looptrace._distributed import collectives as _collectives  # noqa: PLC0415 - torch extra

    reduced = _collectives.reduce(snapshot, window, scale)
    return _local(snapshot) if reduced is None else reduced


def _local(snapshot: Snapshot) -> Snapshot:
    _note_local_once()
    return snapshot


@functools.cache
def _note_local_once() -> None:
    _log.info(
        "looptrace: reset(across_ranks=True) without an initialised torch.distributed process "
        "group returns this rank's statistics only"
    )
