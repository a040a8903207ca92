"""Append-only JSON Lines files: one complete line per `write()`, whatever happens.

Every line is written with one `write()` on a file opened with `O_APPEND` and no user-space
buffer, so a line is complete on disk as soon as the call returns, and a killed process leaves
at most one truncated last line (which every reader skips with a warning). Reopening a file
whose last line was cut short starts on a fresh line.

Files are created private: mode 0600 (less where the umask takes more away); a file that
exists keeps its mode, so a user who wants others to read it creates it first. A final path
component that is a symbolic link is followed only when the link belongs to the user running
looptrace: a link planted by someone else in a shared directory (`/tmp`) is refused, so
looptrace never appends to a file it was not pointed at.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
import weakref
from pathlib import Path
from typing import Final

from looptrace._base.errors import ConfigError
from looptrace._export.records import LOSS_KIND

FLUSH_TIMEOUT_S = 10.0  # a local or shared filesystem; a stalled one must not hang exit
PRIVATE_MODE: Final = 0o600  # of the files looptrace creates, before the umask


def open_private(path: Path, flags: int) -> int:
    """Open `path` with `flags`, creating it with `PRIVATE_MODE`, never through a foreign link.

    The final component is opened without following a symbolic link (`O_NOFOLLOW`); a link
    owned by the user running looptrace (one they made) is followed, one owned by anyone
    else is refused with `ELOOP`.

    Raises:
        OSError: the file cannot be opened, or is a link owned by another user.

    """
    flags |= getattr(os, "O_CLOEXEC", 0)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.open(path, flags | nofollow, PRIVATE_MODE)
    except OSError as error:
        # ELOOP: a link; EACCES: a link the kernel refuses to follow (fs.protected_symlinks)
        link = os.lstat(path) if error.errno in (errno.ELOOP, errno.EACCES) else None
        if link is None or not stat.S_ISLNK(link.st_mode):
            raise
        if link.st_uid != os.geteuid():
            raise OSError(
                errno.ELOOP,
                f"it is a symbolic link owned by another user (uid {link.st_uid}); looptrace "
                "does not write through it",
                str(path),
            ) from None
        if not nofollow or error.errno != errno.ELOOP:
            raise
    return os.open(path, flags, PRIVATE_MODE)


class LineFile:
    """An append-only file written one complete line per `write()`; safe across threads.

    A write that fails part-way (a full disk, a file size limit) is cut back to the last
    complete line, so the file never ends inside a line and the next write starts cleanly.
    """

    def __init__(self, path: Path, setting: str = "trace_file") -> None:
        self.path = path
        self._lock = threading.Lock()
        self.created_dirs = [p for p in reversed(path.parents) if not p.exists()]
        self.created = not os.path.lexists(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = open_private(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        except OSError as error:
            self._remove_created(files=False)
            raise ConfigError(
                f"{setting}: cannot open {path} for writing: {error.strerror}"
            ) from None
        try:
            if _ends_inside_a_line(self._fd):
                self.write(b"\n")  # a killed writer left a partial line; keep it on its own
        except OSError as error:
            self.remove()
            raise ConfigError(f"{setting}: cannot write to {path}: {error.strerror}") from None
        if hasattr(os, "register_at_fork"):  # an exporter thread may hold the lock at fork
            ref = weakref.ref(self)

            def renew_lock() -> None:
                target = ref()
                if target is not None:
                    target._lock = threading.Lock()

            os.register_at_fork(after_in_child=renew_lock)

    def write(self, line: bytes) -> None:
        """Append `line` (complete lines) whole, or raise `OSError` leaving the file as it was."""
        with self._lock:
            if self._fd is None:
                raise OSError(errno.EBADF, "closed", str(self.path))
            size = os.fstat(self._fd).st_size
            view = memoryview(line)
            try:
                while view:
                    written = os.write(self._fd, view)
                    if written == 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
                    view = view[written:]
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, size)
                raise

    def close(self) -> None:
        """Close the file; later writes raise."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def remove(self) -> None:
        """Close the file and delete it, and the directories, if this object created them."""
        self.close()
        self._remove_created(files=True)

    def _remove_created(self, *, files: bool) -> None:
        if files and self.created:
            with contextlib.suppress(OSError):
                self.path.unlink()
        for directory in reversed(self.created_dirs):
            with contextlib.suppress(OSError):
                directory.rmdir()


def _ends_inside_a_line(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def loss_line(what: str, count: int) -> bytes:
    """Return the line that records `count` spans or windows lost before it (none if 0)."""
    if count <= 0:
        return b""
    return json.dumps({"kind": LOSS_KIND, what: count}, separators=(",", ":")).encode() + b"\n"
