"""A process whose step hangs, run by tests/test_hangs.py: the watchdog must tell where.

Usage: ``python hang_worker.py SNAPSHOT TRACE HOW`` runs fast steps of `root.train` for a
second and a half (so the watchdog sees steps come and go), then hangs inside
`root.train.data`, HOW: `python` (a pure-Python loop), `wait` (`threading.Event.wait`, no GIL
held) or `gil` (a C `sleep` called through `ctypes.PyDLL`, which holds the GIL). It prints
`hanging` first; the test kills it.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import threading
import time

import looptrace


def spin() -> None:
    """Hang in pure Python."""
    count = 0
    while True:
        count += 1


def wait_forever() -> None:
    """Hang in a wait that releases the GIL."""
    threading.Event().wait()


def hold_gil() -> None:
    """Hang in a C call that holds the GIL (`PyDLL` does not release it)."""
    ctypes.PyDLL(None).sleep(3600)


HANGS = {"python": spin, "wait": wait_forever, "gil": hold_gil}


def main(snapshot: str, trace: str, how: str) -> None:
    """Run fast steps, then hang as `how` says."""
    # Ctrl-C raises KeyboardInterrupt, as at a terminal, even where the process was started
    # with SIGINT ignored (from a background job of a shell, as a CI script may be)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    lt = looptrace.configure(
        snapshot_file=snapshot,
        trace_file=trace,
        trace_every=1,
        traces_exporter="none",
        metrics_exporter="none",
        hang_after=1.0,
        hang_factor=3.0,
    )
    train = lt.timer("train")
    until = time.monotonic() + 1.5
    while time.monotonic() < until:
        train.record("data")
        time.sleep(0.005)
        train.record("forward")
        time.sleep(0.005)
        train.record()
    lt.reset()
    train.record("data")
    print("hanging", flush=True)
    HANGS[how]()


if __name__ == "__main__":
    main(*sys.argv[1:4])
