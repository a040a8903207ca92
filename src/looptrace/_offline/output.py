"""Where the CLI may write: never over one of its inputs, never over a file it did not write.

`looptrace perfetto` and `looptrace plot` write one file. An output that is one of the input
files (the same file, after resolving links) is refused, `--force` or not; an existing,
non-empty file that is not looptrace's own output of that kind (a Perfetto trace whose
`otherData` names looptrace, a PNG whose `Software` text names looptrace) is kept unless the
user passes `--force`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from looptrace._offline.reader import InputError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SOFTWARE_KEY = "Software"  # the PNG text chunk that names the program that wrote the file
_PNG_HEAD = 4096  # matplotlib writes its text chunks before the image data
_TRACE_TAIL = 4096  # `otherData` is the last key of a trace looptrace writes


def check_output(
    output: Path, inputs: Sequence[str], *, force: bool, ours: Callable[[Path], bool]
) -> None:
    """Refuse to write `output` over an input, or over someone else's file without `force`.

    Raises:
        InputError: one line naming the output and what to do.

    """
    for name in inputs:
        if _same_file(output, name):
            raise InputError(f"{output} is one of the input files; choose another output")
    try:
        size = output.stat().st_size
    except OSError:
        return  # nothing there (or nothing readable): opening it says why if it fails
    if not output.is_file():
        raise InputError(f"{output} exists and is not a file")
    if size and not force and not ours(output):
        raise InputError(
            f"{output} exists and is not a looptrace output; pass --force to overwrite it"
        )


def _same_file(output: Path, name: str) -> bool:
    try:
        return os.path.samefile(output, name)
    except (OSError, ValueError):  # one of them does not exist: not the same file
        return False


def is_looptrace_trace(path: Path) -> bool:
    """Whether `path` is a Chrome trace written by `looptrace perfetto`."""
    try:
        with path.open("rb") as handle:
            head = handle.read(16)
            handle.seek(max(0, path.stat().st_size - _TRACE_TAIL))
            tail = handle.read()
    except OSError:
        return False
    return head.startswith(b'{"traceEvents":') and b'"generator":"looptrace ' in tail


def is_looptrace_png(path: Path) -> bool:
    """Whether `path` is a PNG written by `looptrace plot` (its `Software` names looptrace)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_PNG_HEAD)
    except OSError:
        return False
    return head.startswith(PNG_SIGNATURE) and f"{SOFTWARE_KEY}\0looptrace ".encode() in head
