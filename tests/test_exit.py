"""Pending spans and a final metrics push go out on normal exit and on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from .otlp_server import OtlpReceiver

# 30 laps of train with a data section each, a reset after 20; the 31st lap keeps running.
# Batches would only leave after a minute, so whatever arrives was flushed by exit handling.
LOOP = """
    import os, signal, sys, time
    import looptrace
    from looptrace.testing import FakeClock

    {before}
    clock = FakeClock()
    lt = looptrace.configure(clock=clock, otlp_endpoint=sys.argv[1], trace_every=1)
    train = lt.timer("train")
    for step in range(30):
        train.record("data"); clock.advance(0.01); train.record()
        if step == 19:
            lt.reset()
    {after}
"""
WAIT = """
    print("ready", flush=True)
    while not stop:
        time.sleep(0.01)
    print("stopped by", int(stop), "health", lt.health().dropped_spans, flush=True)
    os._exit(3)  # skips atexit: only the SIGTERM flush can have delivered anything
"""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """Yield an OTLP/HTTP receiver."""
    with OtlpReceiver("http/protobuf") as rx:
        yield rx


def start(receiver: OtlpReceiver, before: str = "", after: str = "") -> subprocess.Popen[str]:
    """Start the loop in a child process that exports to `receiver`."""
    code = textwrap.dedent(LOOP).format(
        before=textwrap.dedent(before), after=textwrap.dedent(after)
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, receiver.endpoint],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OTEL_BSP_SCHEDULE_DELAY": "60000"},
    )


def counts(receiver: OtlpReceiver) -> dict[str, int]:
    """Return the span count and the latest pushed section counts."""
    metrics = receiver.latest_metrics()["looptrace.section.duration"]
    return {
        "spans": len(receiver.spans),
        "root.train": metrics["root.train"]["count"],
        "root.train.data": metrics["root.train.data"]["count"],
    }


def test_normal_exit_flushes_spans_and_the_final_window(receiver: OtlpReceiver) -> None:
    """Leaving the program without shutdown() still delivers every span and the last window."""
    process = start(receiver)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert counts(receiver) == {"spans": 60, "root.train": 30, "root.train.data": 30}


def test_sigterm_flushes_then_dies_by_sigterm(receiver: OtlpReceiver) -> None:
    """SIGTERM with no handler of the application: flush, final window, then the default."""
    process = start(receiver, after="print('ready', flush=True)\ntime.sleep(60)")
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM
    assert counts(receiver) == {"spans": 60, "root.train": 30, "root.train.data": 30}


def test_sigterm_flushes_then_calls_the_applications_handler(receiver: OtlpReceiver) -> None:
    """An application handler installed first is chained: flush first, then its behaviour."""
    before = """
        stop = 0
        def on_term(signum, frame):  # no print here: the signal may interrupt one
            global stop
            stop = signum
        signal.signal(signal.SIGTERM, on_term)
    """
    process = start(receiver, before=before, after=WAIT)
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 3, err
    assert out.splitlines() == [f"stopped by {int(signal.SIGTERM)} health 0"]
    # Spans flushed; metrics pushed as of the last reset (the window since then stays open).
    assert counts(receiver) == {"spans": 60, "root.train": 20, "root.train.data": 20}


def test_sigterm_ignored_by_the_application_still_flushes(receiver: OtlpReceiver) -> None:
    """With SIGTERM ignored before configure(), looptrace flushes and the process carries on."""
    before = """
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop = 0
        def on_usr1(signum, frame):
            global stop
            stop = signum
        signal.signal(signal.SIGUSR1, on_usr1)
    """
    process = start(receiver, before=before, after=WAIT)
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    assert receiver.wait_for_spans(60, timeout=20)
    assert process.poll() is None  # still running: SIGTERM stays ignored
    process.send_signal(signal.SIGUSR1)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 3, err
    assert out.splitlines() == [f"stopped by {int(signal.SIGUSR1)} health 0"]
    assert counts(receiver) == {"spans": 60, "root.train": 20, "root.train.data": 20}


FILES_LOOP = """
    import os, sys
    import looptrace
    from looptrace.testing import FakeClock

    clock = FakeClock()
    lt = looptrace.configure(
        clock=clock, trace_file=sys.argv[1], snapshot_file=sys.argv[2], trace_every=1
    )
    train = lt.timer("train")
    for step in range(30):
        train.record("data"); clock.advance(0.01); train.record()
        if step == 19:
            lt.reset()
    print("ready", flush=True)
    sys.stdin.readline()  # wait here for SIGTERM
"""


def test_sigterm_flushes_offline_files(tmp_path: Path) -> None:
    """With only offline files configured, SIGTERM still writes pending spans and the window."""
    spans, snapshots = tmp_path / "spans.jsonl", tmp_path / "snaps.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(FILES_LOOP), str(spans), str(snapshots)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OTEL_BSP_SCHEDULE_DELAY": "60000"},
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM, err
    batches = [json.loads(line) for line in spans.read_text().splitlines()]
    count = sum(
        len(scope["spans"])
        for batch in batches
        for resource in batch["resourceSpans"]
        for scope in resource["scopeSpans"]
    )
    assert count == 60  # 30 laps and 30 data sections; the running 31st lap is not a span yet
    lines = snapshots.read_text().splitlines()
    assert len(lines) == 2  # the reset after step 19 and the final window at SIGTERM
