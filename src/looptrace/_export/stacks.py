"""Every thread's Python stack, written by `faulthandler`, which needs no GIL to write it.

`faulthandler` walks the interpreter's thread states from C and writes to a file descriptor,
so it works when the thread that hangs holds the GIL in a C call that never returns: its
`dump_traceback_later` fires from a C thread of its own, where no Python thread can run.
looptrace arms it with the deadline of the open step (`StackAlarm`), so a process whose
Python threads are all frozen still writes its stacks into the stacks file, and disarms it
when the watchdog, which can run, writes the evidence itself (`dump_stacks`).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import tempfile
import threading
import weakref
from pathlib import Path
from typing import IO, Final

from looptrace._export.line_file import open_private

MAX_STACKS_BYTES: Final = 256 * 1024  # the most of a dump kept in a log line or a `hang` line


def dump_stacks() -> str:
    """Return the Python stack of every thread, as `faulthandler` writes it ("" if it cannot)."""
    try:
        with tempfile.TemporaryFile() as handle:
            faulthandler.dump_traceback(handle, all_threads=True)
            handle.seek(0)
            return handle.read(MAX_STACKS_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError, RuntimeError):
        return ""


class StackAlarm:
    """`faulthandler.dump_traceback_later` aimed at the next deadline, writing to `path`.

    The file (the snapshot file's name with `.stacks` added, else standard error) is opened
    when the alarm is first armed; each dump appends to it. `close` removes it again when
    nothing was written, so a healthy run leaves no empty stacks file behind. `faulthandler`
    has one such alarm per process: an application's own `dump_traceback_later` and
    looptrace's replace each other.

    A process forked while the alarm is armed would hang at its exit (the child inherits the
    alarm's lock but not its thread, and the interpreter's exit waits for that thread): the
    alarm is disarmed before every fork, its lock held across it, and the watchdog re-aims it
    in the parent at its next look.
    """

    def __init__(self, path: Path | None, *, enabled: bool = True) -> None:
        self.path = path
        self.enabled = enabled  # False: never armed (a fake clock's deadlines are not real)
        self._file: IO[bytes] | None = None
        self._opened_by: int | None = None  # the process that created the file
        self._armed: int | None = None  # the deadline armed, monotonic ns
        self._lock = threading.Lock()  # arming and disarming; held across a fork
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def before() -> None:
                alarm = ref()
                if alarm is not None:
                    alarm._lock.acquire()
                    alarm._cancel()

            def after_in_parent() -> None:
                alarm = ref()
                if alarm is not None:
                    alarm._lock.release()

            def after_in_child() -> None:
                alarm = ref()
                if alarm is not None:
                    alarm._lock = threading.Lock()
                    alarm.enabled = False  # the child has no watchdog thread

            os.register_at_fork(
                before=before, after_in_parent=after_in_parent, after_in_child=after_in_child
            )

    def arm(self, deadline_ns: int | None, now: int, grace_s: float) -> None:
        """Fire `grace_s` after `deadline_ns` (None: disarm); re-arms only when it moved."""
        with self._lock:
            if deadline_ns == self._armed or not self.enabled:
                return
            if deadline_ns is None:
                self._cancel()
                return
            target = self._target()
            if target is None:
                return
            timeout = max(0.0, (deadline_ns - now) / 1e9) + grace_s
            try:
                faulthandler.dump_traceback_later(timeout, repeat=False, file=target, exit=False)
            except (OSError, ValueError, RuntimeError):
                return
            self._armed = deadline_ns

    def disarm(self) -> None:
        """Cancel the alarm, if looptrace armed one."""
        with self._lock:
            self._cancel()

    def _cancel(self) -> None:
        if self._armed is not None:
            self._armed = None
            faulthandler.cancel_dump_traceback_later()

    def close(self) -> None:
        """Disarm for good, close the stacks file, and remove it if nothing was written."""
        with self._lock:
            self._cancel()
            self.enabled = False
            if self._file is None:
                return
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
            if self.path is not None and self._opened_by == os.getpid():
                with contextlib.suppress(OSError):
                    if self.path.stat().st_size == 0:
                        self.path.unlink()

    def _target(self) -> int | IO[bytes] | None:
        if self.path is None:
            return 2  # standard error, where the job's log goes
        if self._file is None:
            try:
                fd = open_private(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                self._file = os.fdopen(fd, "ab", buffering=0)
                self._opened_by = os.getpid()
            except OSError:
                return None
        return self._file
