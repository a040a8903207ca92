"""The collectives of cross-rank statistics, and the reduction of what they gather.

Imported only once the program has imported `torch.distributed` (see `looptrace._distributed`).
"""

from __future__ import annotations

import ctypes
import json
import math
from collections.abc import Sequence

import torch
import torch.distributed as dist

from looptrace._snapshot import Snapshot
from looptrace._spread import SPREAD_STATS, RankSpread, SectionSpread


def reduce(snapshot: Snapshot) -> Snapshot | None:
    """Return a copy of `snapshot` with `across_ranks`; None without an initialised group."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    device = _device(str(dist.get_backend()))
    world = dist.get_world_size()
    path_lists = _gather_paths(list(snapshot), world, device)
    union = sorted(set().union(*path_lists))
    if not union:
        return snapshot._with_across_ranks({})
    rows = [
        [float(getattr(snapshot[path], stat)) for stat in SPREAD_STATS]
        if path in snapshot
        else [math.nan] * len(SPREAD_STATS)
        for path in union
    ]
    local = torch.tensor(rows, dtype=torch.float64, device=device)
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local)
    matrix = torch.stack(parts).cpu()
    present = [set(paths) for paths in path_lists]
    absent = [tuple(r for r in range(world) if path not in present[r]) for path in union]
    return snapshot._with_across_ranks(spreads(matrix, union, absent))


def spreads(
    matrix: torch.Tensor, paths: Sequence[str], absent: Sequence[tuple[int, ...]]
) -> dict[str, SectionSpread]:
    """Reduce a `[ranks, paths, SPREAD_STATS]` matrix, NaN meaning absent, to spreads per path.

    NaN values count in no statistic; the slowest rank is the lowest rank holding the maximum.
    """
    present = ~torch.isnan(matrix)
    counts = present.sum(dim=0)
    highest = torch.where(present, matrix, -math.inf).max(dim=0).values
    ranks = torch.arange(matrix.shape[0]).view(-1, 1, 1).expand_as(matrix)
    slowest = torch.where(present & (matrix == highest), ranks, matrix.shape[0]).min(dim=0).values
    lowest = torch.where(present, matrix, math.inf).min(dim=0).values
    means = torch.where(present, matrix, 0.0).sum(dim=0) / counts
    columns = zip(
        counts.tolist(),
        lowest.tolist(),
        highest.tolist(),
        means.tolist(),
        slowest.tolist(),
        strict=True,
    )
    result: dict[str, SectionSpread] = {}
    for path, gone, row in zip(paths, absent, columns, strict=True):
        per_stat = {
            stat: RankSpread(min=lo, max=hi, mean=mean, slowest_rank=rank)
            if n
            else RankSpread(min=math.nan, max=math.nan, mean=math.nan, slowest_rank=None)
            for stat, n, lo, hi, mean, rank in zip(SPREAD_STATS, *row, strict=True)
        }
        result[path] = SectionSpread(ranks=matrix.shape[0] - len(gone), absent=gone, **per_stat)
    return result


def _device(backend: str) -> torch.device:
    """Return where the backend's collectives take tensors: CPU for gloo and MPI, else CUDA."""
    if "gloo" in backend or backend == "mpi":
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def _gather_paths(paths: list[str], world: int, device: torch.device) -> list[list[str]]:
    """Return every rank's path list, in rank order: two collectives of fixed-size tensors.

    (Not `all_gather_object`, which needs numpy and pickle.)
    """
    data = json.dumps(paths).encode()
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    sizes = [torch.empty_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    lengths = [int(s.item()) for s in sizes]
    padded = bytearray(max(lengths))
    padded[: len(data)] = data
    local = torch.frombuffer(padded, dtype=torch.uint8).to(device)
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local)
    gathered = []
    for part, length in zip(parts, lengths, strict=True):
        cpu = part.cpu().contiguous()
        gathered.append(json.loads(ctypes.string_at(cpu.data_ptr(), length)))
    return gathered
