"""The collectives of one cross-rank reduction, counted, and replayed after a failure.

Imported only once the program has imported `torch.distributed` (see
`looptrace._distributed.across_ranks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from looptrace._distributed.window_alignment import PeerFailed


@dataclass
class Traffic:
    """What this process's cross-rank reductions moved: collective calls and payload bytes.

    `bytes` adds up the tensor each `all_reduce` call takes and returns in place, i.e. what a
    rank contributes to and receives from the collective.
    """

    calls: int = 0
    bytes: int = 0


TRAFFIC = Traffic()


class Wire:
    """The collectives of one reduction, on the backend's device, counted in `TRAFFIC`.

    It keeps what each collective returned. When this rank fails between two collectives,
    `replay()` lets the reduction run again from the start: the collectives already done
    give back what they returned, with no traffic, and the next one sends a mark every rank
    sees in the result (`_mark`: the type's extreme for MAX and MIN, NaN for a SUM of
    floats), so every rank drops the reduction after that same collective and the ranks stay
    in step for the next one.
    """

    __slots__ = ("device", "done", "script")

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.done: list[torch.Tensor] = []
        self.script: list[torch.Tensor] | None = None

    def replay(self) -> None:
        """Run the reduction again, replaying the collectives done, marking the next."""
        self.script, self.done = self.done, []

    def all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp.RedOpType) -> None:
        """Reduce `tensor` in place across the default group.

        Raises:
            PeerFailed: a rank marked the result (on every rank alike).

        """
        script = self.script
        if script is not None and script:  # done before this rank failed: the same result
            result = script.pop(0)
            if result.shape != tensor.shape:
                raise RuntimeError("looptrace: a replayed collective took another shape")
            tensor.copy_(result)
            self.done.append(result)
            return
        if script is not None:
            _mark(tensor, op)
        TRAFFIC.calls += 1
        TRAFFIC.bytes += tensor.nbytes
        if tensor.numel() > 0:
            if self.device.type == "cpu":
                dist.all_reduce(tensor, op=op)
            else:
                moved = tensor.to(self.device)
                dist.all_reduce(moved, op=op)
                tensor.copy_(moved.cpu())
        self.done.append(tensor.clone())
        if _marked(tensor, op):
            raise PeerFailed


def _mark_of(tensor: torch.Tensor, op: dist.ReduceOp.RedOpType) -> float | int | None:
    """Return what a failed rank sends in a collective: no rank sends it, the result shows it.

    MAX and MIN take the type's largest and smallest value (+inf, -inf for floats), a SUM of
    floats NaN. A SUM of bytes (names, rank bitmaps) cannot be marked: None, the failed rank
    sends zeros, which add nothing, and the reduction goes on to the next collective.
    """
    floating = tensor.dtype.is_floating_point
    if op == dist.ReduceOp.MAX:
        return math.inf if floating else torch.iinfo(tensor.dtype).max
    if op == dist.ReduceOp.MIN:
        return -math.inf if floating else torch.iinfo(tensor.dtype).min
    return math.nan if floating else None


def _mark(tensor: torch.Tensor, op: dist.ReduceOp.RedOpType) -> None:
    """Fill `tensor` with the mark of a failed rank (zeros where there is none)."""
    mark = _mark_of(tensor, op)
    if mark is None:
        tensor.zero_()
    else:
        tensor.fill_(mark)


def _marked(tensor: torch.Tensor, op: dist.ReduceOp.RedOpType) -> bool:
    """Return whether a failed rank's mark shows in a reduced `tensor`."""
    mark = _mark_of(tensor, op)
    if mark is None or tensor.numel() == 0:
        return False
    if isinstance(mark, float) and math.isnan(mark):
        return bool(torch.isnan(tensor).any())
    return bool((tensor == mark).any())
