"""When a step never ends: open sections, the watchdog's lines and stacks, the exit flush."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import looptrace
from looptrace._core.open_sections import OpenSection
from looptrace._export.hang_policy import HangEvent, HangPolicy
from looptrace.testing import FakeClock, capture
from tests.helpers.hangs import hang_lines, lines, standing_hangs, wait_for, wait_printed
from tests.helpers.processes import bare_env

WORKER = Path(__file__).parent / "helpers" / "hang_worker.py"
S = 1_000_000_000


def _plain(sections: list[OpenSection]) -> list[dict[str, object]]:
    return [
        {
            "thread": s.thread_name,
            "path": s.path,
            "step": s.step,
            "seconds": s.seconds,
            "depth": s.depth,
        }
        for s in sections
    ]


def test_open_sections_lists_every_threads_sections_outermost_first() -> None:
    """open_sections() gives each thread's running sections with step and age, read from outside."""
    cap = capture()
    train = cap.lt.timer("train")
    entered, leave = threading.Event(), threading.Event()

    def loader() -> None:
        with cap.lt.timer("prefetch").section("read"):
            entered.set()
            leave.wait(30)

    worker = threading.Thread(target=loader, name="loader")
    worker.start()
    entered.wait(30)
    train.record()
    cap.clock.advance(1.0)
    train.record()  # step 1
    train.record("data")
    cap.clock.advance(2.5)
    try:
        found = _plain(cap.lt.open_sections())
    finally:
        leave.set()
        worker.join(30)
    assert sorted(found, key=lambda s: (s["thread"], s["depth"])) == [
        {"thread": "MainThread", "path": "root.train", "step": 1, "seconds": 2.5, "depth": 0},
        {"thread": "MainThread", "path": "root.train.data", "step": 1, "seconds": 2.5, "depth": 1},
        {"thread": "loader", "path": "root.prefetch", "step": 0, "seconds": 3.5, "depth": 0},
        {"thread": "loader", "path": "root.prefetch.read", "step": 0, "seconds": 3.5, "depth": 1},
    ]
    cap.lt.shutdown()


def test_open_sections_is_empty_when_nothing_runs() -> None:
    """open_sections() lists nothing once every section has ended."""
    cap = capture()
    with cap.lt.timer("eval").section("batch"):
        cap.clock.advance(0.1)
    assert cap.lt.open_sections() == []
    cap.lt.shutdown()


def _step(path: str, step: int, start_s: float, now_s: float, thread: int = 1) -> OpenSection:
    return OpenSection(thread, "main", path, step, now_s - start_s, 0, int(start_s * S))


def test_policy_uses_the_floor_before_any_step_time_is_known() -> None:
    """A first open step is hung past the floor alone; the event is reported once."""
    policy = HangPolicy(factor=10, floor_s=60, repeat_s=30)
    assert policy.look([_step("root.t", 0, 0, 59)], 59 * S) == []
    assert policy.look([_step("root.t", 0, 0, 61)], 61 * S) == [
        HangEvent("hang", 1, "main", "root.t", 0, 61.0, 60.0)
    ]
    assert policy.look([_step("root.t", 0, 0, 62)], 62 * S) == []


def test_policy_threshold_is_a_multiple_of_the_recent_step_time() -> None:
    """Past the floor, the threshold is `factor` times the mean of the steps seen begin."""
    policy = HangPolicy(factor=10, floor_s=1, repeat_s=30)
    for step in range(5):  # a step every 2 s
        policy.look([_step("root.t", step, 2 * step, 2 * step + 0.5)], int((2 * step + 0.5) * S))
    assert policy.threshold_s((1, "root.t")) == 20.0
    assert policy.look([_step("root.t", 4, 8, 27)], 27 * S) == []
    assert [e.kind for e in policy.look([_step("root.t", 4, 8, 28.5)], int(28.5 * S))] == ["hang"]


def test_policy_repeats_while_stuck_and_clears_with_the_duration() -> None:
    """A hung step is repeated every `repeat_s`; its end clears it, lasting to the next step."""
    policy = HangPolicy(factor=10, floor_s=5, repeat_s=10)
    policy.look([_step("root.t", 3, 0, 6)], 6 * S)
    assert policy.look([_step("root.t", 3, 0, 15)], 15 * S) == []
    assert policy.look([_step("root.t", 3, 0, 16)], 16 * S) == [
        HangEvent("repeat", 1, "main", "root.t", 3, 16.0, 5.0)
    ]
    assert policy.standing()
    assert policy.look([_step("root.t", 4, 21, 22)], 22 * S) == [
        HangEvent("cleared", 1, "main", "root.t", 3, 21.0, 5.0)
    ]
    assert not policy.standing()


def test_watchdog_writes_open_sections_and_stacks_then_clears(tmp_path: Path) -> None:
    """On the fake clock: a hang line with the open sections and stacks, then hang_cleared."""
    snapshots = tmp_path / "snap.jsonl"
    cap = capture(snapshot_file=snapshots, hang_after=5.0, hang_factor=10.0)
    train = cap.lt.timer("train")
    for _ in range(3):
        train.record("data")
        cap.clock.advance(0.1)
    train.record()
    train.record("data")
    cap.clock.advance(60.0)
    hang = wait_for(lambda: hang_lines(snapshots), 30, "hang line")[0]
    opened = [
        {k: s[k] for k in ("thread", "path", "step", "seconds", "depth")} for s in hang["open"]
    ]
    keys = ("rank", "world_size", "timer", "step", "threshold_s", "seconds")
    assert {k: hang[k] for k in keys} == {
        "rank": 0, "world_size": 1, "timer": "root.train", "step": 1, "threshold_s": 5.0,
        "seconds": 60.0,
    }  # fmt: skip
    assert opened == [
        {"thread": "MainThread", "path": "root.train", "step": 1, "seconds": 60.0, "depth": 0},
        {"thread": "MainThread", "path": "root.train.data", "step": 1, "seconds": 60.0, "depth": 1},
    ]
    assert hang["open"][1]["role"] == "data"
    assert "test_watchdog_writes_open_sections_and_stacks_then_clears" in hang["stacks"]
    found = [f.to_dict() for f in cap.lt.reset().diagnosis() if f.kind == "hang"]
    assert [{k: f[k] for k in ("severity", "path", "rank", "message")} for f in found] == [
        {
            "severity": "critical",
            "path": "root.train.data",
            "rank": 0,
            "message": "step 1 of root.train open for 60 s (threshold 5 s), stuck in "
            "root.train.data for 60 s",
        }
    ]
    train.record()  # the step ends
    cleared = wait_for(lambda: hang_lines(snapshots, "looptrace.hang_cleared"), 30, "clear")
    assert [(c["timer"], c["step"], c["seconds"]) for c in cleared] == [("root.train", 1, 60.0)]
    cap.lt.shutdown()
    assert not [line for line in hang_lines(snapshots) if line.get("exit")]


def test_a_window_holding_only_the_hung_step_still_names_the_hang(tmp_path: Path) -> None:
    """The last window, closed at shutdown mid-hang with no whole lap, carries the hang finding."""
    snapshots = tmp_path / "snap.jsonl"
    cap = capture(snapshot_file=snapshots, hang_after=5.0, hang_factor=10.0)
    train = cap.lt.timer("train")
    train.record("data")
    cap.clock.advance(0.1)
    train.record()  # a lap ends; the next begins before the reset, so its window is partial
    cap.clock.advance(0.1)
    cap.lt.reset()
    train.record("data")
    cap.clock.advance(60.0)
    wait_for(lambda: hang_lines(snapshots), 30, "hang line")
    cap.lt.shutdown()
    last = [line for line in lines(snapshots) if line["kind"] == "looptrace.snapshot"][-1]
    assert last["partial"] is True
    assert [(f["kind"], f["path"]) for f in last["findings"]] == [("hang", "root.train.data")]


def test_no_watchdog_on_an_injected_clock_unless_asked(tmp_path: Path) -> None:
    """With a fake clock and no hang_after, no watchdog thread runs."""
    cap = capture(snapshot_file=tmp_path / "s.jsonl")
    assert not [t for t in threading.enumerate() if t.name == "looptrace-watchdog" and t.is_alive()]
    cap.lt.shutdown()


@pytest.mark.parametrize(("value", "message"), [(-1, "hang_after"), ("x", "hang_after")])
def test_bad_hang_after_is_refused(value: Any, message: str) -> None:
    """A negative or non-number hang_after is a ConfigError naming it."""
    with pytest.raises(looptrace.ConfigError, match=message):
        capture(hang_after=value)


def test_hang_after_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """LOOPTRACE_HANG_AFTER=0 turns the watchdog off even with a real clock."""
    monkeypatch.setenv("LOOPTRACE_HANG_AFTER", "0")
    lt = looptrace.configure(traces_exporter="none", metrics_exporter="none")
    assert not [t for t in threading.enumerate() if t.name == "looptrace-watchdog" and t.is_alive()]
    lt.shutdown()
    monkeypatch.setenv("LOOPTRACE_HANG_AFTER", "soon")
    with pytest.raises(looptrace.ConfigError, match="LOOPTRACE_HANG_AFTER"):
        looptrace.configure(traces_exporter="none", metrics_exporter="none")


def _start(tmp_path: Path, how: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    snapshots, spans = tmp_path / "snap.jsonl", tmp_path / "spans.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(snapshots), str(spans), how],
        env=bare_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return proc, snapshots, spans


def _kill(proc: subprocess.Popen[bytes]) -> str:
    if proc.poll() is None:
        proc.kill()
    _, err = proc.communicate(timeout=60)
    return err.decode(errors="replace")


@pytest.mark.parametrize(("how", "frame"), [("python", "spin"), ("wait", "wait_forever")])
def test_a_hang_in_python_or_a_gil_free_wait_is_told_with_stacks(
    tmp_path: Path, how: str, frame: str
) -> None:
    """A step stuck in Python code or in Event.wait gets a hang line, stacks and a log record."""
    proc, snapshots, _ = _start(tmp_path, how)
    try:
        hang = wait_for(lambda: hang_lines(snapshots), 60, "hang line")[0]
        paths = [(s["path"], s["depth"]) for s in hang["open"] if s["thread"] == "MainThread"]
        assert paths == [("root.train", 0), ("root.train.data", 1)]
        assert f"in {frame}" in hang["stacks"]
        assert hang["seconds"] >= hang["threshold_s"] >= 1.0
    finally:
        err = _kill(proc)
    assert "rank 0 hung: step" in err
    assert f"in {frame}" in err


def test_a_hang_in_a_c_call_holding_the_gil_still_writes_stacks(tmp_path: Path) -> None:
    """A C call that holds the GIL freezes the watchdog; faulthandler's alarm writes the stacks."""
    proc, snapshots, _ = _start(tmp_path, "gil")
    stacks = Path(f"{snapshots}.stacks")
    try:
        text = wait_for(
            lambda: stacks.exists() and "in hold_gil" in stacks.read_text() and stacks.read_text(),
            60,
            "stacks of the frozen process",
        )
        assert "Timeout" in text
    finally:
        _kill(proc)
    assert hang_lines(snapshots) == []  # no Python thread could write one


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_after_a_hang_writes_the_open_sections_and_cuts_their_spans(
    tmp_path: Path, signum: int
) -> None:
    """SIGTERM or Ctrl-C after a hang: an exit line with the open sections, spans ended as cut."""
    proc, snapshots, spans = _start(tmp_path, "wait")
    try:
        wait_printed(proc, b"hanging", 60)  # a busy machine may make a fast step a hang too:
        wait_for(
            lambda: standing_hangs(snapshots), 60, "hang line"
        )  # the signal is sent in the hang
        proc.send_signal(signum)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no exit 60 s after the signal:\n{_kill(proc)[-4000:]}") from None
    finally:
        _kill(proc)
    assert proc.returncode == -signum
    exits = [line for line in hang_lines(snapshots) if line.get("exit")]
    assert [[(s["path"], s["depth"]) for s in e["open"]] for e in exits] == [
        [("root.train", 0), ("root.train.data", 1)]
    ]
    last = [line for line in lines(snapshots) if line["kind"] == "looptrace.snapshot"][-1]
    assert [f["path"] for f in last["findings"] if f["kind"] == "hang"] == ["root.train.data"]
    cut = [
        (span["name"], span["status"].get("message", ""))
        for record in lines(spans)
        for resource in record["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
        if "cut" in span.get("status", {}).get("message", "")
    ]
    assert sorted(cut) == [
        ("data", "cut: still running at shutdown"),
        ("train", "cut: still running at shutdown"),
    ]


def test_a_slow_step_that_ends_clears_the_hang_and_is_traced(tmp_path: Path) -> None:
    """A step past the threshold that ends gets hang_cleared, and its spans as a slow step."""
    snapshots, spans = tmp_path / "snap.jsonl", tmp_path / "spans.jsonl"
    lt = looptrace.configure(
        snapshot_file=snapshots,
        trace_file=spans,
        trace_every=0,
        traces_exporter="none",
        metrics_exporter="none",
        hang_after=0.5,
        hang_factor=3.0,
    )
    train = lt.timer("train")
    until = time.monotonic() + 1.5
    while time.monotonic() < until:
        train.record("data")
        time.sleep(0.002)
        train.record()
    train.record("data")
    hang = wait_for(lambda: hang_lines(snapshots), 60, "hang line")[0]
    train.record()
    cleared = wait_for(lambda: hang_lines(snapshots, "looptrace.hang_cleared"), 60, "clear")
    lt.shutdown()
    assert cleared[0]["step"] == hang["step"]
    assert cleared[0]["seconds"] >= hang["seconds"]
    traced = {
        span["name"]
        for record in lines(spans)
        for resource in record["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
        if {"key": "looptrace.step", "value": {"intValue": str(hang["step"])}} in span["attributes"]
    }
    assert traced == {"train", "data"}


def test_hang_lines_do_not_disturb_the_snapshot_readers(tmp_path: Path) -> None:
    """A snapshot file that starts with hang lines still reads as a snapshot file."""
    path = tmp_path / "snap.jsonl"
    hang = {"kind": "looptrace.hang", "rank": 0, "world_size": 1, "time": 1.0, "open": []}
    window = {
        "kind": "looptrace.snapshot", "version": 1, "step": 1, "time": 2.0, "start_ns": 0,
        "end_ns": 10**9, "rank": 0, "world_size": 1, "host": "h",
        "stats": {"root.t": {"count": 1, "total": 1.0, "mean": 1.0, "min": 1.0, "max": 1.0}},
    }  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in (hang, window)))
    from looptrace._offline.reader import SNAPSHOTS, open_inputs

    warnings: list[str] = []
    kind, files = open_inputs([str(path)], warnings.append)
    assert (kind, len(files), warnings) == (SNAPSHOTS, 1, [])


def test_prometheus_serves_the_open_steps_age_at_scrape_time() -> None:
    """looptrace_step_open_seconds and looptrace_open_section_seconds grow while a step is stuck."""
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client.parser import text_string_to_metric_families

    from tests.helpers.otlp_server import LOCALHOST, free_port

    def scrape(port: int) -> dict[tuple[str, str], float]:
        with urllib.request.urlopen(f"http://{LOCALHOST}:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        return {
            (
                sample.name,
                sample.labels.get("looptrace_timer") or sample.labels.get("looptrace_path", ""),
            ): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name.startswith(("looptrace_step_open", "looptrace_open_section"))
        }

    port = free_port()
    clock = FakeClock()
    rank = looptrace.RankInfo(rank=2, world_size=4)
    lt = looptrace.configure(
        tracer_provider=TracerProvider(), clock=clock, rank=rank, prometheus=port
    )
    train = lt.timer("train")
    train.record("data")
    clock.advance(12.0)
    first = scrape(port)
    clock.advance(30.0)
    second = scrape(port)
    lt.shutdown()
    assert first == {
        ("looptrace_step_open_seconds", "root.train"): 12.0,
        ("looptrace_open_section_seconds", "root.train.data"): 12.0,
    }
    assert second == {
        ("looptrace_step_open_seconds", "root.train"): 42.0,
        ("looptrace_open_section_seconds", "root.train.data"): 42.0,
    }


def test_otlp_metrics_carry_the_open_steps_age_pushed_at_a_hang(tmp_path: Path) -> None:
    """A hang pushes OTLP metrics with looptrace.step.open and looptrace.open_section gauges."""
    from opentelemetry.sdk.trace import TracerProvider

    from tests.helpers.otlp_server import OtlpReceiver

    with OtlpReceiver("http/protobuf") as rx:
        clock = FakeClock()
        lt = looptrace.configure(
            tracer_provider=TracerProvider(),
            clock=clock,
            otlp_endpoint=rx.endpoint,
            metrics_exporter="otlp",
            hang_after=5.0,
        )
        train = lt.timer("train")
        train.record("data")
        clock.advance(0.1)
        train.record()
        train.record("data")
        lt.reset()  # a first window, of a whole step: the metrics have a start
        clock.advance(60.0)
        assert rx.wait_for_metrics(lambda m: "looptrace.step.open" in m, 30)
        metrics = rx.latest_metrics()
        lt.shutdown()
    step = next(iter(metrics["looptrace.step.open"].values()))
    section = metrics["looptrace.open_section"]["root.train.data"]
    assert (step["attributes"]["looptrace.timer"], step["value"]) == ("root.train", 60.0)
    assert (section["attributes"]["thread.name"], section["value"]) == ("MainThread", 60.0)


def test_a_fork_while_the_stacks_alarm_is_armed_leaves_a_child_that_exits() -> None:
    """A child forked with the alarm armed exits normally; the parent re-arms its alarm."""
    worker = Path(__file__).parent / "helpers" / "hang_fork_worker.py"
    done = subprocess.run(
        [sys.executable, str(worker)], env=bare_env(), capture_output=True, timeout=120, check=False
    )
    assert done.stdout.decode().split("\n") == ["armed", "child exited 0", "re-armed", ""], done


def test_shutdown_does_not_wait_for_a_look_stuck_in_a_write() -> None:
    """A watchdog stuck writing (a stalled file) lets shutdown go on; the failure is counted."""
    from looptrace._configure.hang_watchdog import engine_of
    from looptrace._export.stacks import StackAlarm
    from looptrace._export.watchdog import Watchdog
    from looptrace._stats.health import Incidents
    from looptrace._stats.roles import Roles

    cap = capture()
    writing, release = threading.Event(), threading.Event()

    def stalled(_record: dict[str, Any]) -> None:  # a filesystem that stopped answering
        writing.set()
        release.wait(60)

    incidents = Incidents()
    watchdog = Watchdog(
        engine_of(cap.lt),
        HangPolicy(factor=10, floor_s=5, repeat_s=5),
        rank=looptrace.RankInfo(),
        incidents=incidents,
        roles=Roles,
        write_line=stalled,
        alarm=StackAlarm(None, enabled=False),
        interval_s=0.05,
    )
    watchdog.start()
    cap.lt.timer("train").record("data")
    cap.clock.advance(60.0)
    try:
        assert writing.wait(30)
        stopper = threading.Thread(target=watchdog.stop)
        stopper.start()
        stopper.join(30)
        assert not stopper.is_alive()
        assert incidents.internal_errors == 1
    finally:
        release.set()
        cap.lt.shutdown()


def test_a_stacks_file_nothing_was_written_to_is_removed_at_close(tmp_path: Path) -> None:
    """A healthy run leaves no empty stacks file; a stacks file with a dump in it stays."""
    from looptrace._export.stacks import StackAlarm

    quiet, dumped = tmp_path / "quiet.stacks", tmp_path / "dumped.stacks"
    for path in (quiet, dumped):
        alarm = StackAlarm(path)
        now = time.monotonic_ns()
        alarm.arm(now + 3600 * S, now, grace_s=1.0)  # far away: never fires here
        assert path.exists()
        if path is dumped:
            path.write_bytes(b"Thread 0x1 (most recent call first):\n")
        alarm.close()
    assert not quiet.exists()
    assert dumped.read_bytes().startswith(b"Thread")


def test_threads_hung_together_are_told_in_one_record_with_the_stacks_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """20 pool threads hung at once: one ERROR with every step, one stacks reading, a line each."""
    from looptrace._configure.hang_watchdog import engine_of
    from looptrace._export.stacks import StackAlarm
    from looptrace._export.watchdog import Watchdog
    from looptrace._stats.health import Incidents
    from looptrace._stats.roles import Roles

    cap = capture()
    written: list[dict[str, Any]] = []
    watchdog = Watchdog(
        engine_of(cap.lt),
        HangPolicy(factor=10, floor_s=5, repeat_s=5),
        rank=looptrace.RankInfo(),
        incidents=Incidents(),
        roles=Roles,
        write_line=written.append,
        alarm=StackAlarm(None, enabled=False),
    )  # not started: each look below is made by this test
    pool = cap.lt.timer("pool")
    entered, release = threading.Barrier(21), threading.Event()

    def worker() -> None:
        pool.record("wait")
        entered.wait(30)
        release.wait(60)
        pool.stop()

    threads = [threading.Thread(target=worker, name=f"pool-{i}") for i in range(20)]
    for thread in threads:
        thread.start()
    try:
        entered.wait(30)
        cap.clock.advance(60.0)
        with caplog.at_level(logging.WARNING, logger="looptrace"):
            assert len(watchdog.look() or []) == 20
            cap.clock.advance(6.0)
            assert [e.kind for e in watchdog.look() or []] == ["repeat"] * 20
            release.set()
            for thread in threads:
                thread.join(30)
            assert [e.kind for e in watchdog.look() or []] == ["cleared"] * 20
    finally:
        release.set()
        cap.lt.shutdown()
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "looptrace"]
    assert [level for level, _ in records] == ["ERROR", "WARNING", "WARNING"]
    error = records[0][1]
    assert "and 19 more steps (below)" in error
    assert error.count("Also hung:") == 1 and error.count("Python stacks:") == 1
    assert records[1][1].startswith("looptrace: rank 0 still stuck: step 0 of root.pool open")
    assert records[1][1].endswith("; and 12 more")
    assert records[2][1].endswith("; and 12 more (hang cleared)")
    hangs = [line for line in written if line["kind"] == "looptrace.hang"]
    assert len(hangs) == 40 and len(written) == 60
    assert ["stacks" in line for line in hangs[:20]] == [True] + [False] * 19
    assert {len(line["open"]) for line in hangs[:1]} == {40}  # every thread's step and wait
    assert [line.get("repeat") for line in hangs[20:]] == [True] * 20
    assert {line["innermost"] for line in hangs[1:]} == {"root.pool.wait"}
