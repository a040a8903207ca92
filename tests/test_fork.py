"""After fork a child starts empty, with fresh locks, and the parent's numbers stay."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

from looptrace.testing import capture


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_records_and_resets_without_deadlock() -> None:
    """A child forked while another thread holds a lock records and resets from empty."""
    cap = capture(trace_every=0)
    train = cap.lt.timer("training")
    train.record("data")
    cap.clock.advance(1.0)
    state = cap.lt._engine.state()
    holder = threading.Thread(target=lambda: None)
    holder.start()
    holder.join()
    read, write = os.pipe()
    with state.lock:  # a lock held at fork time must not deadlock the child
        pid = os.fork()
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
            "PATH": "/usr/bin:/bin",
            "SLURM_PROCID": "1",
            "SLURM_NTASKS": "2",
            "SLURM_JOB_ID": "42",
        },
    ).stdout.split("\n")
    assert out[:2] == ["child True True", "parent True"]
