"""Renders per-path statistics as an indented tree table for a terminal."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from looptrace._base.units import format_seconds
from looptrace._offline.text import escaped
from looptrace._stats.snapshot import SectionStats

COLUMNS = ("section", "count", "mean", "p50", "p99", "total", "% parent", "self")


def tree_paths(stats: Mapping[str, SectionStats]) -> list[tuple[str, str, int]]:
    """Return `(path, parent, depth)` per path, each parent followed by its children.

    Siblings come largest total first; `parent` is the nearest listed ancestor ("" if none).
    """
    children: dict[str | None, list[str]] = {}
    for path in stats:
        parent = _nearest_parent(stats, path) if path else ""
        children.setdefault(parent or None, []).append(path)
    order: list[tuple[str, str, int]] = []
    stack: list[tuple[str | None, int, list[str]]] = [(None, 0, _by_total(stats, children, None))]
    while stack:  # depth first, without recursion: a file may nest paths arbitrarily deep
        node, depth, pending = stack[-1]
        if not pending:
            stack.pop()
            continue
        path = pending.pop(0)
        order.append((path, node or "", depth))
        if path:
            stack.append((path, depth + 1, _by_total(stats, children, path)))
    return order


def _by_total(
    stats: Mapping[str, SectionStats], children: Mapping[str | None, list[str]], parent: str | None
) -> list[str]:
    return sorted(children.get(parent, ()), key=lambda p: (-_order_key(stats[p].total), p))


def _order_key(total: float) -> float:
    return -math.inf if math.isnan(total) else total


def tree_rows(stats: Mapping[str, SectionStats]) -> list[tuple[str, ...]]:
    """Return one row of `COLUMNS` per path, in the order of `tree_paths`."""
    rows: list[tuple[str, ...]] = []
    for path, parent, depth in tree_paths(stats):
        entry = stats[path]
        share = (
            f"{100 * entry.total / stats[parent].total:.1f}"
            if parent and stats[parent].total > 0
            else ""
        )
        rows.append(
            (
                "  " * depth + escaped(path[len(parent) + 1 :] if parent else path),
                str(entry.count),
                format_seconds(entry.mean),
                format_seconds(entry.p50),
                format_seconds(entry.p99),
                format_seconds(entry.total),
                share,
                format_seconds(entry.self_time),
            )
        )
    return rows


def render_table(
    stats: Mapping[str, SectionStats],
    extra: Sequence[tuple[str, Mapping[str, str]]] = (),
) -> str:
    """Return the tree table of `stats` as aligned text, header first.

    `extra` adds columns after the standard ones: `(header, {path: cell})`.
    """
    paths = [path for path, _, _ in tree_paths(stats)]
    header = (*COLUMNS, *(name for name, _ in extra))
    rows = [header]
    for path, row in zip(paths, tree_rows(stats), strict=True):
        rows.append((*row, *(cells.get(path, "") for _, cells in extra)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _nearest_parent(stats: Mapping[str, SectionStats], path: str) -> str:
    """Return the longest proper prefix path of `path` present in `stats` ("" if none)."""
    head = path.rpartition(".")[0]
    while head:
        if head in stats:
            return head
        head = head.rpartition(".")[0]
    return ""
