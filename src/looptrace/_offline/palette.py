"""One colour per section name, the same in `looptrace plot`, `report` and `watch`.

A section's colour comes from a hash of its name (the last level of its path), not from its
rank among the sections shown, so `backward` has the same colour in every plot, report and
live view of every run. Sections shown together stay apart: one whose colour another shown
section has, or one close to it (two shades of one hue), takes the next colour that is
neither, in path order. At most `LEGEND` sections get a colour; the rest are `OTHER`.
"""

from __future__ import annotations

import math
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


# Two colours closer than this (Euclidean, in 0-255 RGB) read as one in a stack.
CLOSE = 64.0


# The usual sections of a training step, on hues far apart: they never move for each other.
KNOWN = {
    "data": 0,
    "forward": 1,
    "backward": 2,
    "optimizer": 3,
    "allreduce": 4,
    "loss": 5,
    **dict.fromkeys(("eval", "evaluate", "evaluation", "val", "validation"), 6),
    **dict.fromkeys(("checkpoint", "ckpt", "save_checkpoint"), 8),
}


def preferred(path: str) -> int:
    """Return the palette index a section takes when no shown section has it: by its name."""
    name = path.rpartition(".")[2]
    known = KNOWN.get(name)
    if known is not None:
        return known
    return zlib.crc32(name.encode("utf-8", "surrogatepass")) % len(PALETTE)


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def close(first: str, second: str) -> bool:
    """Whether two colours of the palette are too alike to tell apart side by side."""
    a, b = _rgb(first), _rgb(second)
    return math.dist(a, b) < CLOSE


def colours(paths: Iterable[str]) -> dict[str, str]:
    """Return a distinct colour for each path (and `OTHER`'s grey), stable across outputs."""
    mapping: dict[str, str] = {}
    taken: list[int] = []
    for path in sorted(set(paths)):
        if path == OTHER:
            continue
        index = _free(preferred(path), taken)
        taken.append(index)
        mapping[path] = PALETTE[index]
    mapping[OTHER] = OTHER_COLOUR
    return mapping


def _free(index: int, taken: list[int]) -> int:
    """Return `index`, or the next index neither taken nor close to one taken (else not taken)."""
    order = [(index + step) % len(PALETTE) for step in range(len(PALETTE))]
    for candidate in order:
        if candidate not in taken and not any(close(PALETTE[candidate], PALETTE[t]) for t in taken):
            return candidate
    return next((candidate for candidate in order if candidate not in taken), index)


def colour_of(path: str, mapping: Mapping[str, str]) -> str | None:
    """Return the colour of the section `path` is (or lies under), None if it has none."""
    best: str | None = None
    length = -1
    for section, colour in mapping.items():
        if (path == section or path.startswith(section + ".")) and len(section) > length:
            best, length = colour, len(section)
    return best
