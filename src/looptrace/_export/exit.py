"""Deliver pending telemetry on normal exit, in child processes, and on SIGTERM.

On exit `atexit` shuts the `Looptrace` down. A child of `multiprocessing` (a `Process`, a
pool's worker, a DataLoader worker) started by `fork` or `forkserver` ends with `os._exit`,
which runs no `atexit` handler: there `multiprocessing`'s own finalizers, which such a child
runs before it exits normally, shut it down instead, whether the child configured looptrace
itself or inherited its parent's. On SIGTERM the handler flushes and then does what the
handler installed before it would have done:

- none or the default: shut down (final window, metrics push, spans), then die by SIGTERM
  as the default would;
- `SIG_IGN`: flush spans and the current metric totals, then carry on;
- a function of the application: flush, then call it (it may save a checkpoint and exit; the
  final window then goes out through `atexit`).

The work runs on a helper thread, bounded by the export timeout, while the handler waits for
it, so the interrupted program goes no further. When the signal interrupted the main thread
inside looptrace (in a timer call or a window's close, as the core's own marks say), where it
may hold what the work needs, the handler returns at once and lets the thread finish; so does
a wait that lasts longer than `WAIT_HERE_S` (the thread may hold a lock of an output). The
helper then sends the signal again, and the handler, with nothing left to flush, does what
the previous one would have.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import weakref
from collections.abc import Callable
from multiprocessing import util
from types import FrameType
from typing import TYPE_CHECKING, Final

from looptrace._export.span_export import bounded

if TYPE_CHECKING:
    from looptrace._looptrace import Looptrace
    from looptrace._stats.health import Incidents

_TERMINAL = "_looptrace_ends_process"
Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None
# The longest the interrupted thread waits in the handler for the flush (at most half of its
# bound); a flush still under way then finishes while that thread runs on.
WAIT_HERE_S: Final = 1.0
# The `multiprocessing` finalizer of each `Looptrace` that one holds, in this process.
_FINALIZERS: weakref.WeakKeyDictionary[Looptrace, util.Finalize] = weakref.WeakKeyDictionary()


def install_exit_flush(
    lt: Looptrace, flush: Callable[[], object], timeout_s: float, incidents: Incidents
) -> None:
    """Shut `lt` down at exit and flush it on SIGTERM, chaining the previous handler.

    `atexit` holds `lt` itself, so the last window is written at exit even when nothing
    else refers to it (a `Looptrace` made inside `main()`); `shutdown()` lets go of it.
    `flush` delivers what is pending (exporters, span files) without closing the window;
    the SIGTERM work is bounded by `timeout_s`.
    """
    atexit.register(lt.shutdown)
    _shut_down_at_child_exit(lt)
    util.register_after_fork(lt, _in_forked_child)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    try:
        previous: Handler = signal.getsignal(signal.SIGTERM)
        handler = _handler(weakref.ref(lt), flush, timeout_s, incidents, previous)
        signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # not the main interpreter, or no SIGTERM here
        return


def release_exit_flush(lt: Looptrace) -> None:
    """Let go of `lt` at exit: `shutdown()` ran (a no-op if no exit flush was installed)."""
    atexit.unregister(lt.shutdown)
    finalizer = _FINALIZERS.pop(lt, None)
    if finalizer is not None:
        finalizer.cancel()


def _shut_down_at_child_exit(lt: Looptrace) -> None:
    """Shut `lt` down when this process, if a `multiprocessing` child, ends normally.

    Its finalizers with an exit priority run at the end of a child's target (before the
    children it started are joined), and also at the interpreter's exit elsewhere, where
    `atexit` has shut `lt` down already and cancelled this.
    """
    _FINALIZERS[lt] = util.Finalize(None, lt.shutdown, exitpriority=0)


def _in_forked_child(lt: Looptrace) -> None:
    """In a `multiprocessing` child forked with `lt`: shut it down at the child's exit.

    The child cleared the finalizers it inherited; and it never returns to the code that
    started the intervals running in the forking thread, so they are dropped.
    """
    lt._in_process_child()
    _shut_down_at_child_exit(lt)


class _Flush:
    """The SIGTERM work on a helper thread, and who sends the signal again when it is done."""

    def __init__(self, work: Callable[[], object], timeout_s: float, incidents: Incidents):
        self._lock = threading.Lock()
        self._done = False
        self._returned = False  # the handler returned without waiting for the work
        self._event = threading.Event()

        def run() -> None:
            bounded(work, timeout_s, incidents, "SIGTERM flush")
            with self._lock:
                self._done = True
                signal_again = self._returned
            self._event.set()
            if signal_again:  # back to the main thread, to finish there
                os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=run, name="looptrace-sigterm", daemon=True).start()

    @property
    def done(self) -> bool:
        """Whether the work has finished (or its bound has passed)."""
        return self._event.is_set()

    def wait_here(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the work; False: it goes on and signals when done."""
        self._event.wait(timeout_s)
        with self._lock:
            self._returned = not self._done
            return self._done


def _handler(
    ref: weakref.ref[Looptrace],
    flush: Callable[[], object],
    timeout_s: float,
    incidents: Incidents,
    previous: Handler,
) -> Callable[[int, FrameType | None], None]:
    # Behind another looptrace's handler, the end of the chain decides: the default kills.
    default = previous in (signal.SIG_DFL, None) or getattr(previous, _TERMINAL, False)
    flushing: list[_Flush] = []  # the flush under way, until its signal comes back
    wait_here_s = min(WAIT_HERE_S, timeout_s / 2)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if flushing:
            if not flushing[0].done:
                return  # SIGTERM again while flushing: the flush's own signal finishes
            flushing.clear()  # the flush's own signal
        else:
            target = ref()
            if target is not None:
                work: Callable[[], object] = target.shutdown if default else flush
                inside = target._inside_a_call()
                job = _Flush(work, timeout_s, incidents)
                flushing.append(job)  # (before any wait: a signal may come during it)
                if not job.wait_here(0.0 if inside else wait_here_s):
                    return  # the flush's own signal finishes
                flushing.clear()
        if callable(previous):
            previous(signum, frame)
        elif default:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    setattr(on_sigterm, _TERMINAL, default)
    return on_sigterm
