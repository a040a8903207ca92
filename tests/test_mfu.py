"""MFU of counted units: only from the user's peak FLOP/s and FLOPs per unit, exact, everywhere."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from looptrace import ConfigError, RankInfo, TimerError
from looptrace.testing import Capture, capture

# Powers of two, so that every figure below is exact in binary floating point.
PEAK = 1024.0


def _laps(cap: Capture, laps: int, count: dict[str, tuple[float, float | None]]) -> None:
    """Run `laps` laps of 0.5 s of timer `train`, counting `{unit: (n, flops_per_unit)}` in each."""
    train = cap.lt.timer("train")
    for _ in range(laps):
        train.record()
        for unit, (n, flops) in count.items():
            train.count(unit, n, flops_per_unit=flops)
        cap.clock.advance(0.5)
    train.stop()


def test_mfu_is_exact_from_both_numbers() -> None:
    """MFU = units x FLOPs per unit / window wall time / peak; FLOPs per count or by unit name."""
    cap = capture(peak_flops=PEAK, flops_per_unit={"samples": 32.0})
    try:
        _laps(cap, 4, {"tokens": (64, 4.0), "samples": (2, None)})
        cap.clock.advance(2.0)  # outside the laps: the window is 4 s of wall time
        rates = cap.lt.reset().rates["root.train"]
    finally:
        cap.lt.shutdown()
    # tokens: 256 x 4 FLOPs over 4 s = 256 FLOP/s of 1024; samples: 8 x 32 / 4 s = 64 of 1024.
    assert {unit: rate.to_dict() for unit, rate in rates.items()} == {
        "samples": {"total": 8.0, "per_s": 2.0, "per_lap_s": 4.0, "per_lap": 2.0, "mfu": 0.0625},
        "tokens": {"total": 256.0, "per_s": 64.0, "per_lap_s": 128.0, "per_lap": 64.0, "mfu": 0.25},
    }


def test_count_flops_override_configured_and_cover_the_rest() -> None:
    """A count's flops_per_unit prices its own units; the configured figure prices the others."""
    cap = capture(peak_flops=PEAK, flops_per_unit={"tokens": 2.0})
    try:
        train = cap.lt.timer("train")
        train.count("tokens", 128, flops_per_unit=8.0)  # 1024 FLOPs
        train.count("tokens", 512)  # 1024 FLOPs at the configured 2
        cap.clock.advance(1.0)
        rate = cap.lt.reset().rates["root.train"]["tokens"]
    finally:
        cap.lt.shutdown()
    assert rate.mfu == 2.0  # 2048 FLOP/s of a 1024 peak: what the user's numbers say


@pytest.mark.parametrize(
    ("settings", "flops"),
    [
        ({}, 4.0),  # FLOPs per unit but no peak
        ({"flops_per_unit": {"tokens": 4.0}}, None),  # configured FLOPs, no peak
        ({"peak_flops": PEAK}, None),  # a peak but no FLOPs per unit
        ({"peak_flops": PEAK, "flops_per_unit": {"samples": 1.0}}, None),  # another unit's
    ],
)
def test_no_mfu_without_both_numbers(
    tmp_path: Path, settings: dict[str, object], flops: float | None
) -> None:
    """Without the peak and every unit's FLOPs there is no MFU: not in rates, metrics or file."""
    path = tmp_path / "s.jsonl"
    cap = capture(snapshot_file=path, trace_every=0, **settings)
    try:
        _laps(cap, 2, {"tokens": (64, flops)})
        snap = cap.lt.reset()
    finally:
        cap.lt.shutdown()
    assert snap.rates["root.train"]["tokens"].mfu is None
    assert snap.to_dict()["rates"] == {
        "root.train": {
            "tokens": {"total": 128.0, "per_s": 128.0, "per_lap_s": 128.0, "per_lap": 64.0}
        }
    }
    assert not [key for key in snap.as_metrics() if "mfu" in key]
    assert "mfu" not in path.read_text()


def test_units_of_unknown_cost_give_no_mfu() -> None:
    """Some counts priced and some of no known cost: no MFU, never a partial one."""
    cap = capture(peak_flops=PEAK)
    try:
        train = cap.lt.timer("train")
        train.count("tokens", 64, flops_per_unit=4.0)
        train.count("tokens", 64)
        cap.clock.advance(1.0)
        assert cap.lt.reset().rates["root.train"]["tokens"].mfu is None
        train.count("tokens", 64, flops_per_unit=4.0)  # the next window: all priced
        cap.clock.advance(1.0)
        assert cap.lt.reset().rates["root.train"]["tokens"].mfu == 0.25
    finally:
        cap.lt.shutdown()


def test_mfu_in_metrics_of_a_timers_own_window() -> None:
    """train.reset() takes its counts' FLOPs along; as_metrics() has {path}.{unit}_mfu."""
    cap = capture(peak_flops=PEAK)
    try:
        train, evaluate = cap.lt.timer("train"), cap.lt.timer("eval")
        train.count("tokens", 512, flops_per_unit=4.0)
        evaluate.count("tokens", 512, flops_per_unit=2.0)
        cap.clock.advance(4.0)
        mine = train.reset()
        cap.clock.advance(4.0)
        rest = cap.lt.reset()
    finally:
        cap.lt.shutdown()
    assert mine.as_metrics()["timing.root.train.tokens_mfu"] == 0.5
    assert mine.as_metrics(sep="/")["timing/root/train/tokens_mfu"] == 0.5
    assert rest.rates["root.eval"]["tokens"].mfu == 0.125  # its window is 8 s long


def test_mfu_sums_the_flops_of_threads() -> None:
    """Counts with FLOPs from several threads add up to the window's FLOPs."""
    lt = capture(peak_flops=PEAK)
    try:
        train = lt.lt.timer("train")

        def work() -> None:
            for _ in range(256):
                train.count("tokens", 1, flops_per_unit=2.0)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        lt.clock.advance(1.0)
        assert lt.lt.reset().rates["root.train"]["tokens"].mfu == 2.0
    finally:
        lt.lt.shutdown()


def test_mfu_of_a_zero_length_window_is_nan() -> None:
    """A window of no wall time has no FLOP/s: its MFU is NaN, left out of the metrics."""
    cap = capture(peak_flops=PEAK)
    try:
        cap.lt.timer("train").count("tokens", 4, flops_per_unit=1.0)
        snap = cap.lt.reset()
    finally:
        cap.lt.shutdown()
    mfu = snap.rates["root.train"]["tokens"].mfu
    assert mfu is not None and math.isnan(mfu)
    assert "timing.root.train.tokens_mfu" not in snap.as_metrics()


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"peak_flops": 0}, "peak_flops must be .* > 0, got 0"),
        ({"peak_flops": -1.0}, "peak_flops .* got -1.0"),
        ({"peak_flops": math.nan}, "peak_flops .* got nan"),
        ({"peak_flops": math.inf}, "peak_flops .* got inf"),
        ({"peak_flops": True}, "peak_flops .* got True"),
        ({"peak_flops": "989e12"}, "peak_flops .* got '989e12'"),
        ({"flops_per_unit": 6.0}, "flops_per_unit must map unit names to FLOPs, got 6.0"),
        ({"flops_per_unit": {"to.kens": 6.0}}, "'to.kens' is not a unit name"),
        ({"flops_per_unit": {"": 6.0}}, "'' is not a unit name"),
        ({"flops_per_unit": {"tokens": -6.0}}, r"flops_per_unit\['tokens'\] .* got -6.0"),
        ({"flops_per_unit": {"tokens": None}}, r"flops_per_unit\['tokens'\] .* got None"),
    ],
)
def test_configure_refuses_bad_flops_settings(settings: dict[str, object], match: str) -> None:
    """A peak or FLOPs per unit that is not a usable number is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=match):
        capture(**settings)


@pytest.mark.parametrize("flops", [-1.0, math.nan, math.inf, "6", True])
def test_count_refuses_bad_flops_and_keeps_counts(flops: object) -> None:
    """A bad flops_per_unit is a TimerError naming it; neither that count nor its FLOPs land."""
    cap = capture(peak_flops=PEAK)
    try:
        train = cap.lt.timer("train")
        train.count("tokens", 4, flops_per_unit=256.0)
        with pytest.raises(TimerError, match=r"count\('tokens'\) .* flops_per_unit must be"):
            train.count("tokens", 4, flops_per_unit=flops)
        cap.clock.advance(1.0)
        rate = cap.lt.reset().rates["root.train"]["tokens"]
    finally:
        cap.lt.shutdown()
    assert (rate.total, rate.mfu) == (4.0, 1.0)


def test_snapshot_file_and_summary_show_mfu(tmp_path: Path) -> None:
    """The snapshot file has each window's mfu; `looptrace summary` prints the run's MFU."""
    path = tmp_path / "s.jsonl"
    cap = capture(snapshot_file=path, trace_every=0, peak_flops=PEAK)
    try:
        for flops in (2.0, 6.0):  # windows of 2 s at 25 % and 75 %: 50 % over the run
            _laps(cap, 4, {"tokens": (64, flops)})
            cap.lt.reset()
    finally:
        cap.lt.shutdown()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["rates"]["root.train"]["tokens"]["mfu"] for line in lines] == [0.25, 0.75]
    out = subprocess.run(
        [sys.executable, "-m", "looptrace", "summary", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert (
        "throughput root.train tokens: 512 in all, 128/s of wall time, 128/s of lap time, "
        "MFU 50.0 %" in out
    )


def test_summary_mfu_of_a_job_is_the_mean_of_its_ranks(tmp_path: Path) -> None:
    """Over ranks' files the MFU line is the mean of each rank's MFU (each has its own peak)."""
    for rank, flops in ((0, 2.0), (1, 6.0)):
        cap = capture(
            snapshot_file=tmp_path / "s.{rank}.jsonl",
            trace_every=0,
            peak_flops=PEAK,
            rank=RankInfo(rank=rank, world_size=2),
        )
        try:
            _laps(cap, 4, {"tokens": (64, flops)})
            cap.lt.reset()
        finally:
            cap.lt.shutdown()
    out = subprocess.run(
        [sys.executable, "-m", "looptrace", "summary", *map(str, sorted(tmp_path.iterdir()))],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert (
        "throughput root.train tokens: 512 in all, 256/s of wall time, 256/s of lap time "
        "(sum of 2 ranks), MFU 50.0 % (mean of 2 ranks)" in out
    )
