"""Cross-rank statistics: one window's snapshot reduced over the ranks of `torch.distributed`.

Every rank runs the same three collectives in the same order, whatever paths it has, so ranks
that timed different sections never wait on each other:

1. `all_gather` of the byte length of each rank's encoded path list;
2. `all_gather` of the path lists (UTF-8 JSON, padded to the longest), giving each rank the
   union of paths;
3. `all_gather` of a dense float64 matrix, one row per path of the union and one column per
   statistic of `SPREAD_STATS`, NaN where the rank did not run the path.

Each rank then reduces the gathered matrix locally to the same `SectionSpread` per path
(`looptrace._collectives`). Every rank receives `world_size x paths x 6` doubles plus every
rank's path list, once per window. torch is imported only when the program has imported
`torch.distributed` already, so looptrace works, and imports fast, without torch.
"""

from __future__ import annotations

import functools
import logging
import sys

from looptrace._health import Incidents
from looptrace._snapshot import Snapshot

_log = logging.getLogger("looptrace")


def across_ranks(snapshot: Snapshot, incidents: Incidents) -> Snapshot:
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
    from looptrace import _collectives  # noqa: PLC0415 - torch is an extra

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
