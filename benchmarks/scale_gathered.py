"""The all_gather design of cross-rank statistics, kept only to compare with in scale.py.

Every rank gathers every rank's path list and statistics matrix, then reduces them locally:
`world x paths x 6` doubles and every path list received per rank per reset.
"""

from __future__ import annotations

import ctypes
import json
import math
import statistics
import time
from typing import Any

from looptrace._stats.spread import SPREAD_STATS


def gathered_reduce(snapshot: Any, traffic: list[int]) -> Any:
    """The all_gather design: every rank's path list and statistics matrix to every rank."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()

    def all_gather(local: torch.Tensor) -> list[torch.Tensor]:
        parts = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(parts, local)
        traffic[0] += 1
        traffic[1] += world * local.nbytes
        return parts

    data = json.dumps(list(snapshot)).encode()
    lengths = [int(s) for s in all_gather(torch.tensor([len(data)], dtype=torch.int64))]
    padded = bytearray(max(lengths))
    padded[: len(data)] = data
    lists = all_gather(torch.frombuffer(padded, dtype=torch.uint8))
    path_lists = [
        json.loads(ctypes.string_at(part.contiguous().data_ptr(), length))
        for part, length in zip(lists, lengths, strict=True)
    ]
    union = sorted(set().union(*path_lists))
    rows = [
        [float(getattr(snapshot[p], s)) for s in SPREAD_STATS]
        if p in snapshot
        else [math.nan] * len(SPREAD_STATS)
        for p in union
    ]
    matrix = torch.stack(all_gather(torch.tensor(rows, dtype=torch.float64)))
    return snapshot.with_spreads(gathered_spreads(path_lists, union, matrix))


def gathered_spreads(path_lists: list[list[str]], union: list[str], matrix: Any) -> dict:
    """The all_gather design's local work on what it gathered: O(world x paths) per rank."""
    import torch

    from looptrace._stats.spread import RankSpread, SectionSpread

    world = len(path_lists)
    present = ~torch.isnan(matrix)
    counts = present.sum(dim=0)
    highest = torch.where(present, matrix, -math.inf).max(dim=0).values
    ranks = torch.arange(world).view(-1, 1, 1).expand_as(matrix)
    slowest = torch.where(present & (matrix == highest), ranks, world).min(dim=0).values
    lowest = torch.where(present, matrix, math.inf).min(dim=0).values
    fastest = torch.where(present & (matrix == lowest), ranks, world).min(dim=0).values
    means = torch.where(present, matrix, 0.0).sum(dim=0) / counts
    sets = [set(paths) for paths in path_lists]
    result = {}
    for i, path in enumerate(union):
        gone = tuple(r for r in range(world) if path not in sets[r])
        per_stat = {
            stat: RankSpread(
                float(lowest[i, j]),
                float(highest[i, j]),
                float(means[i, j]),
                int(slowest[i, j]),
                int(fastest[i, j]),
            )
            for j, stat in enumerate(SPREAD_STATS)
        }
        result[path] = SectionSpread(ranks=world - len(gone), absent=gone, **per_stat)
    return result


def gathered_local_ms(paths: list[str], world: int, rounds: int) -> float:
    """Time the all_gather design's decoding and reduction of `world` ranks' data, no network."""
    import torch

    encoded = json.dumps(paths).encode()
    matrix = torch.rand((world, len(paths), len(SPREAD_STATS)), dtype=torch.float64)
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        path_lists = [json.loads(encoded) for _ in range(world)]
        gathered_spreads(path_lists, sorted(set().union(*path_lists)), matrix)
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


def same_spreads(a: Any, b: Any) -> bool:
    """Return whether two reduced snapshots agree (means to 1e-9 relative)."""
    da, db = a.to_dict()["across_ranks"], b.to_dict()["across_ranks"]
    if da.keys() != db.keys():
        return False
    for path in da:
        for stat, value in da[path].items():
            other = db[path][stat]
            if isinstance(value, dict):
                if any(not _same(value[k], other[k]) for k in value):
                    return False
            elif value != other:
                return False
    return True


def _same(a: Any, b: Any) -> bool:
    """Return whether two values of a spread agree: floats to 1e-9 relative, ranks exactly."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def gathered_bytes(world: int, paths: list[str]) -> int:
    """Bytes the all_gather design moves per rank per reset: sizes, path lists, matrix."""
    return world * (8 + len(json.dumps(paths)) + len(paths) * len(SPREAD_STATS) * 8)
