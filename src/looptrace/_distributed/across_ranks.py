"""Cross-rank statistics: one window's snapshot reduced over the ranks of `torch.distributed`.

Every rank runs the same `all_reduce`s in the same order, whatever paths it has, so ranks that
timed different sections never wait on each other, and no rank receives another's data:

1. the ranks agree on a table of paths (`looptrace._distributed.path_table`): a 32-byte header each
   window, and only when some rank has paths the table lacks, a hashed slot vector and the
   new names themselves;
2. over that table, one MAX of every statistic and its negation (highest and lowest value),
   one SUM of the values, the ranks holding each one and the ranks running each path, and
   one MAX of the negated ranks holding each highest value (the slowest rank, the lowest on
   a tie);
3. for a path that some but not all ranks ran, the smaller side is named one rank per round
   while it has at most `LISTED` ranks, else by one bitmap of the world's ranks.

Steps 1 and 2 move `32 + 248 x paths` bytes per rank in a window with no new path, whatever
the world size (`looptrace._distributed.collectives.TRAFFIC` counts them). torch is
imported only when the program has imported `torch.distributed` already, so looptrace works,
and imports fast, without torch.
"""

from __future__ import annotations

import functools
import logging
import sys

from looptrace._stats.health import Incidents
from looptrace._stats.snapshot import Snapshot

_log = logging.getLogger("looptrace")


def reduce_or_keep(snapshot: Snapshot, incidents: Incidents) -> Snapshot:
    """Return `snapshot` reduced across ranks; never raises into the caller.

    Without an initialised process group the snapshot comes back unchanged, its
    `across_ranks` None (logged once at INFO). A failing collective is counted in
    `internal_errors` and also gives the local snapshot.
    """
    try:
        return reduce_across_ranks(snapshot)
    except Exception:
        incidents.failed("reset(across_ranks=True)")
        return snapshot


def reduce_across_ranks(snapshot: Snapshot) -> Snapshot:
    """Return a copy of `snapshot` whose `across_ranks` holds the spread of every path.

    A collective: every rank of `torch.distributed`'s default group must call it at the same
    point. Without an initialised group it returns `snapshot` itself.
    """
    if "torch.distributed" not in sys.modules:  # nobody can have initialised a group
        return _local(snapshot)
    from looptrace._distributed import collectives as _collectives  # noqa: PLC0415 - torch extra

    reduced = _collectives.reduce(snapshot)
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
