"""Deliver pending telemetry on normal exit and on SIGTERM (Slurm preemption, `kill`).

On exit `atexit` shuts the `Looptrace` down. On SIGTERM the handler flushes and then does
what the handler installed before it would have done:

- none or the default: shut down (final window, metrics push, spans), then die by SIGTERM
  as the default would;
- `SIG_IGN`: flush spans and the current metric totals, then carry on;
- a function of the application: flush, then call it (it may save a checkpoint and exit; the
  final window then goes out through `atexit`).

The work runs on a helper thread for at most the export timeout: a signal can arrive while
the interrupted training thread holds one of looptrace's locks, so the handler never blocks
on them itself.
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

    `flush` delivers what is pending (exporters, span files) without closing the window;
    the SIGTERM work is bounded by `timeout_s`.
    """
    ref = weakref.ref(lt)

    def at_exit() -> None:
        target = ref()
        if target is not None:
            target.shutdown()

    atexit.register(at_exit)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    try:
        previous: Handler = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _handler(ref, flush, timeout_s, incidents, previous))
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

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        target = ref()
        if target is not None:
            work: Callable[[], object] = target.shutdown if default else flush
            bounded(work, timeout_s, incidents, "SIGTERM flush")
        if callable(previous):
            previous(signum, frame)
        elif default:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    setattr(on_sigterm, _TERMINAL, default)
    return on_sigterm
