"""After fork a child starts empty, with fresh locks, and the parent's numbers stay."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from looptrace.testing import capture

from .helpers.processes import bare_env


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_records_and_resets_without_deadlock() -> None:
    """A child forked while its state is claimed (as by a reset) records and resets from empty."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("training")
    train.record("data")
    cap.clock.advance(1.0)
    state = cap.lt._engine.state()
    holder = threading.Thread(target=lambda: None)
    holder.start()
    holder.join()
    read, write = os.pipe()
    state.claim()  # a claim held at fork time must not deadlock the child
    pid = os.fork()
    if pid:
        state.unclaim()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read)
        try:
            train.record("worker")
            cap.clock.advance(0.5)
            train.stop()
            snap = cap.lt.reset()
            line = repr(sorted((p, s.count, s.total) for p, s in snap.items()))
            os.write(write, line.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    assert child == repr(
        [
            ("root.training", 1, 0.5),
            ("root.training.data", 1, 0.0),
            ("root.training.worker", 1, 0.5),
        ]
    )
    cap.clock.advance(1.0)
    train.stop()
    parent = cap.lt.reset()
    assert {p: s.total for p, s in parent.items()} == {
        "root.training": 2.0,
        "root.training.data": 2.0,
    }


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_service_instance_id_survives_fork() -> None:
    """A forked child keeps the deterministic service.instance.id of its job and rank."""
    code = """
        import os
        from opentelemetry import trace
        import looptrace
        lt = looptrace.configure()
        before = trace.get_tracer_provider().resource.attributes["service.instance.id"]
        pid = os.fork()
        if pid == 0:
            after = trace.get_tracer_provider().resource.attributes["service.instance.id"]
            span = trace.get_tracer("t").start_span("s")
            on_span = span.resource.attributes["service.instance.id"]
            print("child", after == before, on_span == before, flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print("parent", before == looptrace.RankInfo.from_env().instance_id)
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={
            **bare_env(),
            "SLURM_PROCID": "1",
            "SLURM_NTASKS": "2",
            "SLURM_JOB_ID": "42",
        },
    ).stdout.split("\n")
    assert out[:2] == ["child True True", "parent True"]


# Threads lap, enter sections, start and end short-lived timing threads and reset while the
# main thread forks: children by os.fork and by multiprocessing's fork start method each
# reset, time a section and shut down, within 10 s or they count as hung.
FORK_WHILE_TIMING = """
import multiprocessing as mp
import os
import sys
import threading
import time

import looptrace

lt = looptrace.configure(trace_every=1, trace_file=sys.argv[1])
train = lt.timer("training")
stop = threading.Event()

def spin(i):
    t = lt.timer(f"worker{i}")
    while not stop.is_set():
        with t.section("a"):
            pass
        t.record("b")

def churn():
    while not stop.is_set():
        th = threading.Thread(target=lambda: lt.timer("short").record("x"))
        th.start(); th.join()

def resets():
    while not stop.is_set():
        lt.reset(); time.sleep(0.001)

threads = [threading.Thread(target=spin, args=(i,)) for i in range(2)]
threads += [threading.Thread(target=churn), threading.Thread(target=resets)]
for th in threads: th.start()

def child_work():
    train.record("child")
    lt.reset()
    with train.section("x"):
        pass
    snap = lt.reset()
    lt.shutdown()
    return snap

def wait(pid, deadline):
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9); os.waitpid(pid, 0)
    return "hung"

results = []
for k in range(int(sys.argv[2])):
    time.sleep(0.01)
    pid = os.fork()
    if pid == 0:
        snap = child_work()
        os._exit(0 if snap["root.training.x"].count == 1 else 5)
    results.append(wait(pid, time.monotonic() + 10))

ctx = mp.get_context("fork")
for k in range(int(sys.argv[3])):
    p = ctx.Process(target=child_work)
    p.start(); p.join(10)
    if p.exitcode is None:
        p.kill(); p.join(); results.append("hung")
    else:
        results.append(p.exitcode)
stop.set()
for th in threads: th.join()
train.record(); lt.reset()
lt.shutdown()
print(results)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_other_threads_time_never_hangs_the_child(tmp_path: Path) -> None:
    """Children forked at any moment while other threads time sections finish their work."""
    out = subprocess.run(
        [sys.executable, "-c", FORK_WHILE_TIMING, str(tmp_path / "spans.jsonl"), "12", "6"],
        capture_output=True,
        text=True,
        timeout=400,
        check=True,
    )
    assert out.stdout.splitlines()[-1] == repr([0] * 18)
