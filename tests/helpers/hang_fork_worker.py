"""A process that forks while the watchdog's stacks alarm is armed; the child must exit.

Run by tests/test_hangs.py: prints `armed`, forks a child that exits normally (through the
interpreter's own exit, which waits for `faulthandler`'s alarm thread if the child inherited
one), waits for it and prints its exit status, then `ok` after the parent re-armed.
"""

from __future__ import annotations

import os
import sys
import time

import looptrace
from looptrace._export.watchdog import Watchdog


def main() -> None:
    """Fork with the alarm armed; report the child's exit and the parent's re-arming."""
    lt = looptrace.configure(traces_exporter="none", metrics_exporter="none", hang_after=600)
    watchdog = next(c.__self__ for c in lt._outputs.on_close if isinstance(c.__self__, Watchdog))
    lt.timer("train").record("data")
    deadline = time.monotonic() + 30
    while watchdog.alarm._armed is None and time.monotonic() < deadline:
        time.sleep(0.05)
    print("armed" if watchdog.alarm._armed is not None else "never armed", flush=True)
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # the interpreter's exit: would wait forever for an inherited alarm
    _, status = os.waitpid(pid, 0)
    print(f"child exited {os.waitstatus_to_exitcode(status)}", flush=True)
    deadline = time.monotonic() + 30
    while watchdog.alarm._armed is None and time.monotonic() < deadline:
        time.sleep(0.05)
    print("re-armed" if watchdog.alarm._armed is not None else "not re-armed", flush=True)
    lt.shutdown()


if __name__ == "__main__":
    main()
