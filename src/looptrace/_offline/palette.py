"""One colour per section path, the same in `looptrace plot`, `report` and `watch`.

A path's colour comes from a hash of the path itself, not from its rank among the sections
shown, so `root.training.forward` has the same colour in every plot, report and live view of
every run. Two paths shown together never share one: the second (in path order) takes the
next free colour. At most `LEGEND` sections get a colour; the rest are drawn as `OTHER`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

LEGEND = 8  # sections with a colour of their own in a legend; the rest are "other"
OTHER = "other"
OTHER_COLOUR = "#c7c7c7"
TIMER_COLOUR = "#8a8a8a"  # a timer's own (self) time
# Tableau 20 without its greys (kept for "other" and a timer's own time): distinct hues, each
# in a dark and a light shade.
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#a0cbe8",
    "#ffbe7d",
    "#8cd17d",
    "#b6992d",
    "#86bcb6",
    "#d37295",
    "#fabfd2",
    "#d4a6c8",
    "#499894",
)


def preferred(path: str) -> int:
    """Return the palette index a path takes when no other shown path has it."""
    return zlib.crc32(path.encode("utf-8", "surrogatepass")) % len(PALETTE)


def colours(paths: Iterable[str]) -> dict[str, str]:
    """Return a distinct colour for each path (and `OTHER`'s grey), stable across outputs."""
    mapping: dict[str, str] = {}
    taken: set[int] = set()
    for path in sorted(set(paths)):
        if path == OTHER:
            continue
        index = preferred(path)
        while index in taken and len(taken) < len(PALETTE):
            index = (index + 1) % len(PALETTE)
        taken.add(index)
        mapping[path] = PALETTE[index]
    mapping[OTHER] = OTHER_COLOUR
    return mapping


def colour_of(path: str, mapping: Mapping[str, str]) -> str | None:
    """Return the colour of the section `path` is (or lies under), None if it has none."""
    best: str | None = None
    length = -1
    for section, colour in mapping.items():
        if (path == section or path.startswith(section + ".")) and len(section) > length:
            best, length = colour, len(section)
    return best
