"""Throughput: Timer.count(), iterate(items=...), and the window's rates everywhere they show."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import looptrace
from looptrace import TimerError
from looptrace.testing import Capture, FakeClock, capture

from .helpers.ports import LOCALHOST, free_port


def test_count_gives_exact_rates_per_window(cap: Capture) -> None:
    """total, per_s (window wall time), per_lap_s (lap time) and per_lap are exact."""
    train = cap.lt.timer("train")
    cap.clock.advance(1.0)  # outside any lap: in the window's wall time only
    for _ in range(4):
        train.record()
        train.count("tokens", 512)
        train.count("samples")
        cap.clock.advance(0.25)
    train.stop()
    cap.clock.advance(1.0)
    rates = cap.lt.reset().rates
    tokens = rates["root.train"]["tokens"]
    assert (tokens.total, tokens.per_s, tokens.per_lap_s, tokens.per_lap) == (
        2048.0,
        2048.0 / 3.0,
        2048.0,
        512.0,
    )
    assert rates["root.train"]["samples"].total == 4.0
    assert list(rates) == ["root.train"]


def test_count_before_reset_is_in_old_window_after_in_new(cap: Capture) -> None:
    """A count made before reset() lands in the closing window, one after it in the next."""
    train = cap.lt.timer("train")
    train.record()
    train.count("tokens", 10)
    cap.clock.advance(1.0)
    first = cap.lt.reset()
    train.count("tokens", 3)
    cap.clock.advance(1.0)
    second = cap.lt.reset()
    third = cap.lt.reset()
    assert first.rates["root.train"]["tokens"].total == 10.0
    assert second.rates["root.train"]["tokens"].total == 3.0
    assert second.rates["root.train"]["tokens"].per_s == 3.0
    assert dict(third.rates) == {}


def test_counts_of_threads_add_up(cap: Capture) -> None:
    """Counts from several threads, each on its own, are summed in the window."""
    train = cap.lt.timer("train")

    def work() -> None:
        for _ in range(1000):
            train.count("samples", 2)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cap.lt.reset().rates["root.train"]["samples"].total == 8000.0


def test_counts_race_with_reset_lose_nothing(cap: Capture) -> None:
    """Counts made while another thread resets land in exactly one window each."""
    train = cap.lt.timer("train")
    stop = threading.Event()
    done: list[int] = []

    def work() -> None:
        n = 0
        while not stop.is_set() or n < 20_000:
            train.count("samples")
            n += 1
        done.append(n)

    thread = threading.Thread(target=work)
    thread.start()
    windows = [cap.lt.reset() for _ in range(200)]
    stop.set()
    thread.join(timeout=60)
    windows.append(cap.lt.reset())
    got = sum(w.rates["root.train"]["samples"].total for w in windows if "root.train" in w.rates)
    assert got == done[0]


def test_timer_reset_takes_its_subtree_counts_only(cap: Capture) -> None:
    """train.reset() takes train's counts; another timer's stay in the window going on."""
    train, evaluate = cap.lt.timer("train"), cap.lt.timer("eval")
    train.count("tokens", 5)
    evaluate.count("tokens", 7)
    cap.clock.advance(1.0)
    mine = train.reset()
    assert dict(mine.rates["root.train"])["tokens"].total == 5.0
    assert "root.eval" not in mine.rates
    assert cap.lt.reset().rates["root.eval"]["tokens"].total == 7.0


def test_rates_without_laps_are_nan_where_undefined(cap: Capture) -> None:
    """A timer that counted but never lapped has per_s, and NaN per lap and lap second."""
    cap.lt.timer("io").count("bytes", 100)
    cap.clock.advance(2.0)
    rate = cap.lt.reset().rates["root.io"]["bytes"]
    assert rate.per_s == 50.0
    assert math.isnan(rate.per_lap_s)
    assert math.isnan(rate.per_lap)


@pytest.mark.parametrize(
    ("unit", "n", "match"),
    [
        ("to.kens", 1, "contains '.'"),
        ("", 1, "must not be empty"),
        (3, 1, "must be a str"),
        ("tokens", -1, "finite number >= 0, got -1"),
        ("tokens", math.nan, "finite number >= 0"),
        ("tokens", math.inf, "finite number >= 0"),
        ("tokens", "12", "finite number >= 0, got '12'"),
        ("tokens", True, "finite number >= 0, got True"),
        ("tokens", 10**400, "finite number >= 0"),
    ],
)
def test_count_refuses_bad_input_and_keeps_counts(
    cap: Capture, unit: object, n: object, match: str
) -> None:
    """A bad unit or amount is a TimerError naming it; what was counted stays."""
    train = cap.lt.timer("train")
    train.count("tokens", 4)
    with pytest.raises(TimerError, match=match):
        train.count(unit, n)
    assert cap.lt.reset().rates["root.train"]["tokens"].total == 4.0


def test_iterate_counts_samples_per_item(cap: Capture) -> None:
    """iterate(items=int) counts that many samples per item; a callable reads the item."""
    train = cap.lt.timer("train")
    for _ in train.iterate(range(3), items=32):
        cap.clock.advance(0.5)
    batches = [[1, 2], [3, 4, 5], [6]]
    for _ in train.iterate(batches, items=len):
        cap.clock.advance(0.5)
    rate = cap.lt.reset().rates["root.train"]["samples"]
    assert (rate.total, rate.per_lap, rate.per_lap_s) == (102.0, 17.0, 34.0)


def test_iterate_without_items_counts_nothing(cap: Capture) -> None:
    """iterate() without items counts no unit; a bad items value is refused at once."""
    train = cap.lt.timer("train")
    for _ in train.iterate(range(3)):
        pass
    assert dict(cap.lt.reset().rates) == {}
    with pytest.raises(TimerError, match="got -2"):
        train.iterate(range(3), items=-2)


def test_rates_in_metrics_and_dict(cap: Capture) -> None:
    """as_metrics() has {path}.{unit}_per_s etc.; to_dict() a "rates" key."""
    train = cap.lt.timer("train")
    train.record()
    train.count("tokens", 100)
    cap.clock.advance(2.0)
    train.stop()
    snap = cap.lt.reset()
    flat = snap.as_metrics()
    assert flat["timing.root.train.tokens"] == 100.0
    assert flat["timing.root.train.tokens_per_s"] == 50.0
    assert flat["timing.root.train.tokens_per_lap_s"] == 50.0
    assert flat["timing.root.train.tokens_per_lap"] == 100.0
    assert snap.as_metrics(sep="/")["timing/root/train/tokens_per_s"] == 50.0
    assert snap.to_dict()["rates"] == {
        "root.train": {
            "tokens": {"total": 100.0, "per_s": 50.0, "per_lap_s": 50.0, "per_lap": 100.0}
        }
    }


def test_count_after_shutdown_is_counted_misuse(cap: Capture) -> None:
    """count() after shutdown() does nothing and counts as misuse, never raising."""
    train = cap.lt.timer("train")
    cap.lt.shutdown()
    train.count("tokens", 1)
    assert cap.lt.health().misuse == 1


def test_real_torch_loop_tokens_per_second() -> None:
    """On a real torch loop, tokens_per_s is within 1 % of tokens counted by hand over wall time."""
    torch = pytest.importorskip("torch")
    lt = looptrace.configure(trace_every=0, rank=looptrace.RankInfo())
    try:
        model = torch.nn.Sequential(torch.nn.Embedding(100, 32), torch.nn.Linear(32, 100))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        train = lt.timer("train")
        batches = [torch.randint(0, 100, (8, 256)) for _ in range(40)]
        lt.reset()
        start = time.perf_counter()
        tokens = 0
        for batch in train.iterate(batches, items=lambda b: b.shape[0]):
            with train.section("step"):
                loss = model(batch).logsumexp(-1).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            train.count("tokens", batch.numel())
            tokens += batch.numel()
        wall = time.perf_counter() - start
        snap = lt.reset()
        rate = snap.rates["root.train"]["tokens"]
        assert rate.total == tokens
        assert snap.rates["root.train"]["samples"].total == 320
        assert rate.per_s == pytest.approx(tokens / wall, rel=0.01)
        assert rate.per_lap_s == pytest.approx(tokens / snap["root.train"].total, rel=1e-9)
    finally:
        lt.shutdown()


def test_snapshot_file_and_summary_show_rates(tmp_path: Path) -> None:
    """The snapshot file has each window's rates; `looptrace summary` prints the job's rate."""
    path = tmp_path / "s.jsonl"
    cap = capture(snapshot_file=path, trace_every=0)
    train = cap.lt.timer("train")
    for _ in range(2):
        for _ in range(4):
            train.record()
            train.count("tokens", 250)
            cap.clock.advance(0.25)
        train.stop()
        cap.clock.advance(1.0)  # outside the laps: wall time only
        cap.lt.reset()
    cap.lt.shutdown()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["rates"] for line in lines] == [
        {
            "root.train": {
                "tokens": {"total": 1000.0, "per_s": 500.0, "per_lap_s": 1000.0, "per_lap": 250.0}
            }
        }
    ] * 2
    out = subprocess.run(
        [sys.executable, "-m", "looptrace", "summary", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert (
        "throughput root.train tokens: 2,000 in all, 500/s of wall time, 1,000/s of lap time" in out
    )


def test_prometheus_serves_items_counter_and_window_rate() -> None:
    """/metrics has looptrace_items_total{looptrace_unit} summed over windows and the rate gauge."""
    port = free_port()
    clock = FakeClock(start_s=0.0)
    lt = looptrace.configure(
        clock=clock, trace_every=0, rank=looptrace.RankInfo(), prometheus=f"{LOCALHOST}:{port}"
    )
    try:
        train = lt.timer("train")
        for tokens in (100, 300):
            train.count("tokens", tokens)
            clock.advance(2.0)
            lt.reset()
        with urllib.request.urlopen(f"http://{LOCALHOST}:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    finally:
        lt.shutdown()
    samples = {
        (s.name, s.labels.get("looptrace_path"), s.labels.get("looptrace_unit")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("looptrace_items_total", "root.train", "tokens")] == 400.0
    assert samples[("looptrace_items_window_rate", "root.train", "tokens")] == 150.0


def test_otlp_metrics_carry_items_sum_and_rate(cap: Capture) -> None:
    """A metric reader gets looptrace.items (monotonic sum) and looptrace.items.window.rate."""
    train = cap.lt.timer("train")
    train.count("samples", 64)
    cap.clock.advance(4.0)
    cap.lt.reset()
    data = cap.metrics.get_metrics_data()
    assert data is not None
    found = {
        metric.name: metric
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    (items,) = found["looptrace.items"].data.data_points
    (rate,) = found["looptrace.items.window.rate"].data.data_points
    assert (items.value, rate.value) == (64.0, 16.0)
    assert found["looptrace.items"].data.is_monotonic
    assert dict(items.attributes)["looptrace.unit"] == "samples"
    assert dict(items.attributes)["looptrace.path"] == "root.train"
