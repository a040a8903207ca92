"""The table of section paths that every rank of a job agrees on, grown by the paths new to it.

Cross-rank statistics are vectors indexed by this table, so the ranks must hold the same
table, in the same order, whenever they reduce. Paths the table lacks are exchanged through
a hashed slot vector (`all_reduce` MIN of the lowest rank claiming each slot), then the claimed
names in one byte buffer (`all_reduce` SUM, one writer per row): the bytes depend on how many
paths are new, never on the world size. Two names hashed to one slot are a collision the
next round resolves: the losing name is still new and claims a slot again.

Beside the section paths the table holds the (timer path, unit) pairs the ranks counted
(`Timer.count`): each is agreed as a path is (its name in the same slot vector and byte
buffer, as a JSON pair where a path is a JSON string), and is a row of the throughput
reduce (`looptrace._distributed.job_rates`) rather than of the section statistics.

Each reduction starts with a header: the window number of every rank (see
`looptrace._distributed.window_alignment`) packed with the count and width of the new
names, and a fingerprint of the table (MAX of it and of its negation): when
the ranks disagree (a rank joined afresh, a collective failed half-way), every rank clears its
table and the exchange starts again from nothing.

Imported only once the program has imported `torch.distributed` (see
`looptrace._distributed.across_ranks`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.distributed as dist

from looptrace._distributed.window_alignment import Misaligned, PeerFailed

# An all_reduce that counts what it moves: (tensor, op) -> None, in place.
AllReduce = Callable[[torch.Tensor, dist.ReduceOp.RedOpType], None]
# A (timer path, unit) pair some rank counted: a row of the throughput reduce.
Unit = tuple[str, str]

_MIN_SLOTS = 8
# The header's first two fields hold a window number above a 32-bit field, with its sign:
# WINDOW_BITS + _FIELD_BITS < 63 fits a signed 64-bit integer.
_FIELD_BITS = 32
_FIELD = 1 << _FIELD_BITS
_SLOTS_PER_NAME = 4  # a sparse slot vector keeps collisions rare


def _digest(data: bytes) -> int:
    """Return a non-negative 62-bit hash of `data`, the same in every process."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big") >> 2


class PathTable:
    """The paths and counted units all ranks have agreed on, in agreement order.

    Paths and units are two lists, each in the order it was agreed; the fingerprint covers
    both, each list's chain on its own (a table restored from its `state()` has the same).
    """

    __slots__ = ("_fingerprint", "_index", "_names", "_paths_chain", "_unit_index", "_units")

    def __init__(self) -> None:
        self._names: list[str] = []
        self._index: dict[str, int] = {}
        self._units: list[Unit] = []
        self._unit_index: dict[Unit, int] = {}
        self._fingerprint = 0
        self._paths_chain = 0

    def __len__(self) -> int:
        return len(self._names)

    @property
    def names(self) -> Sequence[str]:
        """Return the paths, in table order."""
        return self._names

    @property
    def units(self) -> Sequence[Unit]:
        """Return the (timer path, unit) pairs counted, in table order."""
        return self._units

    def index(self, path: str) -> int:
        """Return the row of `path`, which must be in the table."""
        return self._index[path]

    def unit_index(self, unit: Unit) -> int:
        """Return the row of the pair `unit`, which must be in the table."""
        return self._unit_index[unit]

    def clear(self) -> None:
        """Forget every path and unit."""
        self._names, self._index, self._fingerprint = [], {}, 0
        self._units, self._unit_index, self._paths_chain = [], {}, 0

    def keep(self, rows: Iterable[int], units: Iterable[int] | None = None) -> None:
        """Keep only the paths of `rows` and the units of `units` (None: every unit), in order.

        Every rank must pass the same rows.
        """
        kept = [self._names[row] for row in sorted(rows)]
        counted = self._units if units is None else [self._units[row] for row in sorted(units)]
        self.restore((kept, list(counted)))

    def state(self) -> tuple[list[str], list[Unit]]:
        """Return the paths and units, to `restore` the table as it is now."""
        return list(self._names), list(self._units)

    def restore(self, state: tuple[list[str], list[Unit]]) -> None:
        """Make the table hold the paths and units of `state` (from `state()`) again."""
        names, units = state
        self.clear()
        self._add([*names, *units])

    def agree(
        self,
        paths: Iterable[str],
        all_reduce: AllReduce,
        *,
        rank: int,
        world: int,
        window: int = 0,
        units: Iterable[Unit] = (),
    ) -> None:
        """Add every rank's `paths` and `units` that the table lacks; a collective.

        The same on every rank.

        `window` is the number of windows this rank's subtree closed (below 2^30); it shares
        the header with the number and width of the new names.

        Raises:
            Misaligned: the ranks' windows differ (on every rank alike).

        """
        local = list(paths)
        counted = list(units)
        while True:
            new = sorted({path for path in local if path not in self._index})
            encoded = [json.dumps(path).encode() for path in new]  # no NUL byte inside
            pairs = sorted({unit for unit in counted if unit not in self._unit_index})
            encoded += [json.dumps(list(unit)).encode() for unit in pairs]
            new_count = len(encoded)
            width = max(map(len, encoded), default=0)
            if new_count >= _FIELD or width >= _FIELD:
                raise ValueError(f"{new_count} new paths up to {width} bytes: too many to agree on")
            # MAX of (window, count) and of (-window, width) in 64 bits: the highest window
            # with the most new names, the lowest window with the widest name
            header = torch.tensor(
                [
                    window << _FIELD_BITS | new_count,
                    -window << _FIELD_BITS | width,
                    self._fingerprint,
                    -self._fingerprint,
                ],
                dtype=torch.int64,
            )
            all_reduce(header, dist.ReduceOp.MAX)
            first, second, highest, negated_lowest = (int(v) for v in header.tolist())
            latest, earliest = first >> _FIELD_BITS, -(second >> _FIELD_BITS)
            if latest != earliest:
                raise Misaligned(window, earliest, latest)
            count, width = first & (_FIELD - 1), second & (_FIELD - 1)
            if highest != -negated_lowest:
                self.clear()
                continue
            if count == 0:
                return
            self._add(self._exchange(encoded, count, width, all_reduce, rank=rank, world=world))

    def _exchange(
        self,
        encoded: list[bytes],
        count: int,
        width: int,
        all_reduce: AllReduce,
        *,
        rank: int,
        world: int,
    ) -> list[str | Unit]:
        """Return the new names that won a slot this round, decoded, on every rank alike.

        Paths come first, then units, each sorted.
        """
        slots = max(_MIN_SLOTS, 1 << (count * _SLOTS_PER_NAME - 1).bit_length())
        owner = torch.full((slots,), world, dtype=torch.int64)
        mine: dict[int, bytes] = {}
        for name in encoded:
            slot = _digest(name) % slots
            if slot not in mine:  # a second local name on a slot waits for the next round
                mine[slot] = name
                owner[slot] = rank
        all_reduce(owner, dist.ReduceOp.MIN)
        claimed = [slot for slot, who in enumerate(owner.tolist()) if who < world]
        rows = torch.zeros((len(claimed), width), dtype=torch.uint8)
        for row, slot in enumerate(claimed):
            if slot in mine and int(owner[slot]) == rank:
                data = torch.frombuffer(bytearray(mine[slot]), dtype=torch.uint8)
                rows[row, : len(data)] = data
        all_reduce(rows, dist.ReduceOp.SUM)
        if rows.numel() and not bool(rows.any(dim=1).all()):  # a claimed name never came
            raise PeerFailed
        decoded = [json.loads(bytes(row.tolist()).rstrip(b"\0")) for row in rows]
        paths = sorted(name for name in decoded if isinstance(name, str))
        units = sorted((str(p), str(u)) for p, u in (n for n in decoded if isinstance(n, list)))
        return [*paths, *units]

    def _add(self, names: Iterable[str | Unit]) -> None:
        """Add paths and units; the fingerprint chains the paths, then the units, in order."""
        units_chain = 0
        for name in names:
            if isinstance(name, str):
                self._index[name] = len(self._names)
                self._names.append(name)
                self._paths_chain = _digest(self._paths_chain.to_bytes(8, "big") + name.encode())
            else:
                self._unit_index[name] = len(self._units)
                self._units.append(name)
        for unit in self._units:
            units_chain = _digest(units_chain.to_bytes(8, "big") + json.dumps(unit).encode())
        self._fingerprint = (
            _digest(self._paths_chain.to_bytes(8, "big") + units_chain.to_bytes(8, "big"))
            if self._units
            else self._paths_chain
        )
