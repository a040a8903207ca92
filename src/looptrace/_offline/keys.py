"""Single keypresses from the terminal, for `looptrace watch`'s `q`, read without blocking.

`rich` draws but does not read keys, so this puts the terminal in cbreak mode (keys arrive
one by one, unechoed; Ctrl-C still interrupts) for the time of the view and restores it on
the way out. It does so only when the stream is a terminal on a POSIX system: piped or
redirected input, and Windows, are never read, and Ctrl-C stays the way to quit there.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

try:
    import termios
    import tty
except ImportError:  # pragma: no cover - Windows
    termios = None  # type: ignore[assignment]
    tty = None  # type: ignore[assignment]


class Keys:
    """The keys typed at a terminal while the view runs (a context manager)."""

    def __init__(self, stream: TextIO | None, sleep: Callable[[float], None]) -> None:
        self._fd = _terminal_fd(stream)
        self._sleep = sleep
        self._saved: list[Any] | None = None

    @property
    def active(self) -> bool:
        """Return whether keys are read (the stream is a terminal)."""
        return self._fd is not None

    def __enter__(self) -> Keys:
        if self._fd is not None and termios is not None:
            try:
                self._saved = termios.tcgetattr(self._fd)
                tty.setcbreak(self._fd)
            except termios.error:  # a terminal that refuses: keys are not read
                self._fd = None
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._fd is not None and self._saved is not None and termios is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)

    def wait(self, seconds: float) -> str:
        """Return the keys typed within `seconds` ("" if none), sooner if one is typed."""
        if self._fd is None:
            self._sleep(seconds)
            return ""
        ready, _, _ = select.select([self._fd], [], [], seconds)
        if not ready:
            return ""
        try:
            typed = os.read(self._fd, 64)
        except OSError:
            return ""
        if not typed:  # the terminal went away: stop reading it
            self._fd = None
        return typed.decode(errors="replace")


def _terminal_fd(stream: TextIO | None) -> int | None:
    """Return the file descriptor of `stream` if it is a terminal this system can read keys from."""
    if stream is None or termios is None:
        return None
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):  # closed, or replaced (pytest's capture)
        return None
    return fd if os.isatty(fd) else None
