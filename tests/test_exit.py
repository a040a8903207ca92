"""Pending spans and a final metrics push go out on normal exit and on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers.otlp_server import OtlpReceiver
from .helpers.processes import bare_env

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


def child_env() -> dict[str, str]:
    """Return a bare environment for a child, keeping PYTHONPATH (the code under test)."""
    return bare_env({"OTEL_BSP_SCHEDULE_DELAY": "60000"})


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
        env=child_env(),
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
    # The 31st lap, still running, is ended at exit: one more lap and its (cut) span.
    assert counts(receiver) == {"spans": 61, "root.train": 31, "root.train.data": 30}


def test_sigterm_flushes_then_dies_by_sigterm(receiver: OtlpReceiver) -> None:
    """SIGTERM with no handler of the application: flush, final window, then the default."""
    process = start(receiver, after="print('ready', flush=True)\ntime.sleep(60)")
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM
    assert counts(receiver) == {"spans": 61, "root.train": 31, "root.train.data": 30}


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
        env=child_env(),
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
    assert count == 61  # 30 laps and 30 data sections, and the running 31st lap, cut
    lines = snapshots.read_text().splitlines()
    assert len(lines) == 2  # the reset after step 19 and the final window at SIGTERM


# `lt` lives only inside main(), as in most training scripts: nothing else keeps it.
MAIN_LOOP = """
import sys
import looptrace
from looptrace.testing import FakeClock

def main():
    clock = FakeClock()
    lt = looptrace.configure(
        clock=clock, otlp_endpoint=sys.argv[1], trace_file=sys.argv[2],
        snapshot_file=sys.argv[3], trace_every=1,
    )
    train = lt.timer("train")
    for step in range(150):
        train.record("data"); clock.advance(0.01); train.record()
        if step == 99:
            lt.reset()

main()
"""


def _span_lines(path: Path) -> list[dict[str, object]]:
    return [
        span
        for line in path.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def test_exit_writes_the_last_window_of_a_looptrace_local_to_main(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """A Looptrace only main() held: at exit its last window reaches every output, once."""
    spans, snapshots = tmp_path / "spans.jsonl", tmp_path / "snaps.jsonl"
    process = subprocess.run(
        [sys.executable, "-c", MAIN_LOOP, receiver.endpoint, str(spans), str(snapshots)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert process.returncode == 0, process.stderr
    windows = [json.loads(line) for line in snapshots.read_text().splitlines()]
    assert [(w["step"], w["stats"]["root.train.data"]["count"]) for w in windows] == [
        (100, 100),
        (151, 50),
    ]
    pushed = [
        sum(
            point.count
            for rm in request.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == "looptrace.section.duration"
            for point in metric.histogram.data_points
            if any(a.value.string_value == "root.train.data" for a in point.attributes)
        )
        for request in receiver.metric_requests
    ]
    # Cumulative totals, pushed as they stand: the last window is in them, once.
    assert (pushed[-1], max(pushed)) == (150, 150)
    assert len(_span_lines(spans)) == len(receiver.spans) == 301  # 150 data, 151 laps


INTERRUPTED = """
import os, signal, sys
import looptrace
from looptrace.testing import FakeClock

# Ctrl-C raises KeyboardInterrupt as in a terminal, even where the test runs in a background
# job (which starts Python with SIGINT ignored, and then Python leaves it ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)

clock = FakeClock()
lt = looptrace.configure(clock=clock, trace_file=sys.argv[1], trace_every=1)
train, io = lt.timer("train"), lt.timer("io")
io.record("wait")
for step in range(10):
    train.record("data"); clock.advance(0.01)
    with train.section("forward"):
        train.timer("forward").record("matmul")
        clock.advance(0.02)
        if step == 5:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of a step
"""


def test_ctrl_c_mid_step_leaves_no_orphan_span(tmp_path: Path) -> None:
    """After Ctrl-C every exported span's parent is exported; running ones are marked cut."""
    spans = tmp_path / "spans.jsonl"
    process = subprocess.run(
        [sys.executable, "-c", INTERRUPTED, str(spans)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert "KeyboardInterrupt" in process.stderr
    exported = _span_lines(spans)
    ids = {span["spanId"] for span in exported}
    assert [s["name"] for s in exported if s.get("parentSpanId", "") not in ids | {""}] == []
    errors = sorted(
        (s["name"], s["status"].get("message", "")[:30])
        for s in exported
        if s.get("status", {}).get("code") == 2  # ERROR
    )
    assert errors == [
        ("forward", "KeyboardInterrupt: "),
        ("io", "cut: still running at shutdown"),
        ("train", "cut: still running at shutdown"),
        ("wait", "cut: still running at shutdown"),
    ]
    assert len(exported) == 6 * 3 + 3  # data, forward, matmul of 6 steps; one lap; io, wait


# A clock that sends SIGTERM to its own process at its second read once armed: reset() reads
# it first to time itself (before its lock), then holding its lock, so the signal lands inside.
INSIDE_RESET = """
import os, signal, sys, time
import looptrace
from looptrace.testing import FakeClock

class Clock(FakeClock):
    reads_left = 0
    def monotonic_ns(self):
        if self.reads_left:
            self.reads_left -= 1
            if not self.reads_left:
                os.kill(os.getpid(), signal.SIGTERM)
        return super().monotonic_ns()

clock = Clock()
lt = looptrace.configure(clock=clock, snapshot_file=sys.argv[1], trace_every=0)
train = lt.timer("train")
for step in range(30):
    train.record("data"); clock.advance(0.01); train.record()
    if step == 19:
        lt.reset()
print("armed", flush=True)
clock.reads_left = 2
lt.reset()
print("after reset", flush=True)
train.record("data"); clock.advance(0.01)
time.sleep(30)  # SIGTERM ends the process before this returns
"""


def test_sigterm_inside_reset_finishes_it_and_writes_every_window(tmp_path: Path) -> None:
    """SIGTERM while reset() holds its lock: that window and a final one are written, fast."""
    snapshots = tmp_path / "snaps.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-c", INSIDE_RESET, str(snapshots)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "armed\n"
    # Well within the 10 s the flush may take: a handler waiting for reset()'s lock times out.
    _, err = process.communicate(timeout=5)
    assert process.returncode == -signal.SIGTERM, err
    windows = [json.loads(line) for line in snapshots.read_text().splitlines()]
    assert [(w["step"], w["stats"]["root.train"]["count"]) for w in windows] == [
        (20, 20),
        (30, 10),
        (31, 1),
    ]


# A span processor that sends SIGTERM to its own process from `on_start` when armed: the
# signal lands inside a timer call (inside `record()`, its state busy), on either core.
INSIDE_CALL = """
import os, signal, sys, time
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
import looptrace
from looptrace.testing import FakeClock

class Killer(SpanProcessor):
    armed = False
    def on_start(self, span, parent_context=None):
        if self.armed:
            self.armed = False
            os.kill(os.getpid(), signal.SIGTERM)

killer = Killer()
provider = TracerProvider()
provider.add_span_processor(killer)
clock = FakeClock()
lt = looptrace.configure(
    clock=clock, tracer_provider=provider, snapshot_file=sys.argv[1], trace_every=1
)
train = lt.timer("train")
for step in range(30):
    train.record("data"); clock.advance(0.01); train.record()
    if step == 19:
        lt.reset()
print("armed", flush=True)
killer.armed = True
train.record("data")
clock.advance(0.01)
print("after record", flush=True)
time.sleep(30)  # SIGTERM ends the process before this returns
"""


def test_sigterm_inside_a_timer_call_writes_the_final_window(tmp_path: Path) -> None:
    """SIGTERM inside record() (a span processor's on_start): every window written, fast."""
    snapshots = tmp_path / "snaps.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-c", INSIDE_CALL, str(snapshots)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "armed\n"
    # Well within the 10 s the flush may take: a flush waiting for the call times out.
    _, err = process.communicate(timeout=5)
    assert process.returncode == -signal.SIGTERM, err
    windows = [json.loads(line) for line in snapshots.read_text().splitlines()]
    assert [
        (w["step"], w["stats"]["root.train"]["count"], w["stats"]["root.train.data"]["count"])
        for w in windows
    ] == [(20, 20, 20), (31, 11, 11)]


def test_shutdown_delivers_where_no_thread_can_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With thread starts refused (interpreter shutdown, 3.12+), files get every span and window."""
    import threading

    import looptrace
    from looptrace.testing import FakeClock

    clock = FakeClock()
    spans, snapshots = tmp_path / "spans.jsonl", tmp_path / "snaps.jsonl"
    lt = looptrace.configure(
        clock=clock,
        trace_file=str(spans),
        snapshot_file=str(snapshots),
        trace_every=1,
        metrics_exporter="none",
    )

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    train = lt.timer("train")
    for _ in range(3):
        train.record("data")
        clock.advance(0.01)
        train.record()
    lt.reset()
    train.record("data")
    clock.advance(0.01)
    lt.shutdown()
    windows = [json.loads(line) for line in snapshots.read_text().splitlines()]
    assert [w["stats"]["root.train.data"]["count"] for w in windows] == [3, 1]
    assert len(_span_lines(spans)) == 8  # 4 laps, 4 data sections
