"""How every offline command names its inputs: files, directories and quoted globs.

One set of rules for `summary`, `plot`, `perfetto`, `replay`, `report`, `compare` and `watch`:
a file is read as it is; a directory stands for every `*.jsonl` file below it; a name that
does not exist and holds `*`, `?` or `[` is a glob (`**` spans directories), expanded by
looptrace, so it can be quoted past the shell. A file reached twice (named twice, or named
and inside a directory, or through a link) is read once, with one warning.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from pathlib import Path

Warn = Callable[[str], None]


def expand_inputs(names: Sequence[str], warn: Warn) -> list[str]:
    """Return the files named, in order: globs expanded, directories replaced by their files.

    A directory with no `.jsonl` file or a glob matching nothing is warned about and skipped;
    a name that is neither is kept (the reader says what is wrong with it).
    """
    found: list[str] = []
    for name in names:
        path = Path(name)
        if path.is_dir():
            inside = sorted(str(p) for p in path.rglob("*.jsonl") if p.is_file())
            if not inside:
                warn(f"{name}: a directory with no .jsonl files; skipped")
            found += inside
        elif not path.exists() and glob.has_magic(name):
            matches = sorted(glob.glob(name, recursive=True))
            if not matches:
                warn(f"{name}: no file matches; skipped")
            found += [m for m in matches if Path(m).is_file()]
        else:
            found.append(name)
    return _once(found, warn)


def _once(names: list[str], warn: Warn) -> list[str]:
    """Return `names` with every file reached a second time left out, warning once per file."""
    first_of: dict[object, str] = {}
    warned: set[object] = set()
    kept: list[str] = []
    for name in names:
        try:
            status = os.stat(name)
            key: object = (status.st_dev, status.st_ino)
        except OSError:
            key = name
        if key not in first_of:
            first_of[key] = name
            kept.append(name)
        elif key not in warned:
            warned.add(key)
            warn(_twice(first_of[key], name))
    return kept


def _twice(first: str, again: str) -> str:
    """Return the warning for a file reached a second time."""
    if first == again:
        return f"{first}: named more than once; read once"
    return f"{again}: the same file as {first}; read once"
