"""Deliver pending telemetry on normal exit and on SIGTERM (Slurm preemption, `kill`).

On exit `atexit` shuts the `Looptrace` down. On SIGTERM the handler flushes and then does
what the handler installed before it would have done:

- none or the default: shut down (final window, metrics push, spans), then die by SIGTERM
  as the default would;
- `SIG_IGN`: flush spans and the current metric totals, then carry on;
- a function of the application: flush, then call it (it may save a checkpoint and exit; the
  final window then goes out through `atexit`).

The work runs on a helper thread, bounded by the export timeout. When the signal interrupted
the main thread inside looptrace (in `reset()` or a lap), where it may hold a lock the work
needs, the handler returns at once and lets it finish; the helper then sends the signal
again, and the handler, with nothing left to flush, does what the previous one would have.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from looptrace._export.span_export import bounded

if TYPE_CHECKING:
    from looptrace._looptrace import Looptrace
    from looptrace._stats.health import Incidents

_TERMINAL = "_looptrace_ends_process"
Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


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
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    try:
        previous: Handler = signal.getsignal(signal.SIGTERM)
        handler = _handler(weakref.ref(lt), flush, timeout_s, incidents, previous)
        signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # not the main interpreter, or no SIGTERM here
        return


def _handler(
    ref: weakref.ref[Looptrace],
    flush: Callable[[], object],
    timeout_s: float,
    incidents: Incidents,
    previous: Handler,
) -> Callable[[int, FrameType | None], None]:
    # Behind another looptrace's handler, the end of the chain decides: the default kills.
    default = previous in (signal.SIG_DFL, None) or getattr(previous, _TERMINAL, False)
    flushing: list[threading.Event] = []  # the flush under way, until its signal comes back

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        target = ref()
        if target is not None and not flushing:
            work: Callable[[], object] = target.shutdown if default else flush
            if not _inside_looptrace(frame):
                bounded(work, timeout_s, incidents, "SIGTERM flush")
                target = None
        if target is not None and not flushing:
            done = threading.Event()
            flushing.append(done)

            def run() -> None:
                bounded(work, timeout_s, incidents, "SIGTERM flush")
                done.set()
                os.kill(os.getpid(), signum)  # back to the main thread, to finish there

            threading.Thread(target=run, name="looptrace-sigterm", daemon=True).start()
            return
        if flushing:
            if not flushing[0].is_set():
                return  # SIGTERM again while flushing: the flush's own signal finishes
            flushing.clear()
        if callable(previous):
            previous(signum, frame)
        elif default:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    setattr(on_sigterm, _TERMINAL, default)
    return on_sigterm


# the looptrace package: this module lives one layer below its root
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _inside_looptrace(frame: FrameType | None) -> bool:
    """Whether the interrupted thread is inside looptrace, where it may hold a lock."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_PACKAGE):
            return True
        frame = frame.f_back
    return False
