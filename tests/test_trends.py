"""The diagnosis over a run's windows on a fake clock: memory creep and pressure, a drop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from looptrace import Snapshot
from looptrace._diagnosis.finding import Finding
from looptrace._diagnosis.trends import sustained
from looptrace._stats.thresholds import thresholds
from looptrace.testing import Capture, capture
from tests.helpers.allocator import GIB, Allocator

torch = pytest.importorskip("torch")

TRENDS = ("memory_creep", "memory_pressure", "throughput_drop")
CREEP_ACTION = (
    "look for tensors kept across steps: a loss kept with its graph, growing lists or caches"
)
PRESSURE_ACTION = (
    "a smaller batch or sequence, activation checkpointing, or "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation"
)
DROP_ACTION = (
    "compare this window's sections with an earlier one's: which grew, and what else ran then"
)


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> Allocator:
    """torch.cuda initialised, its memory statistics answered by an `Allocator` (80 GiB)."""
    return Allocator().install(monkeypatch.setattr, torch.cuda)


@pytest.fixture
def run() -> Iterator[Capture]:
    """Yield a looptrace on a fake clock that owns the (stand-in) device's peak reset."""
    cap = capture(trace_every=0, device_memory=True)
    yield cap
    cap.lt.shutdown()


def window(cap: Capture, samples: int = 100) -> Snapshot:
    """Run 4 laps of 0.25 s counting `samples` each; reset."""
    train = cap.lt.timer("train")
    for _ in range(4):
        train.record()
        train.count("samples", samples)
        cap.clock.advance(0.25)
    train.stop()
    return cap.lt.reset()


def found(snapshot: Snapshot, kinds: tuple[str, ...] = TRENDS) -> list[Finding]:
    """Return the window's findings of `kinds`."""
    return [f for f in snapshot.diagnosis(min_severity="info") if f.kind in kinds]


def held(allocator: Allocator, allocated_gib: float, reserved_gib: float = 0) -> None:
    """Make the stand-in allocator's peaks these sizes for the coming window."""
    allocator.use(int(allocated_gib * GIB), int((reserved_gib or allocated_gib) * GIB))


def test_a_healthy_run_has_no_trend_finding(run: Capture, allocator: Allocator) -> None:
    """Steady memory and rates: the trends are watched (no abstention) and find nothing."""
    seen = []
    for _ in range(6):
        held(allocator, 10, 12)
        seen.append(found(window(run)))
    assert seen[4:] == [[], []]
    assert all(f.severity == "info" for window_found in seen for f in window_found)


def test_memory_creep_is_named_against_the_first_window_after_the_warm_up(
    run: Capture, allocator: Allocator
) -> None:
    """9 GiB warm-up, 10 GiB baseline, 10.5 (5 %: silent), 11.2 GiB (12 %): a warning."""
    seen = []
    for gib in (9, 10, 10.5, 11.2):
        allocator.use(0, 0)
        allocator.reset_peak_memory_stats()
        held(allocator, gib, 20)
        seen.append(found(window(run), ("memory_creep",)))
    assert [[f.message for f in w] for w in seen[:2]] == [
        ["the first window after the warm-up (1 windows) is the baseline: memory creep not "
         "judged yet"]
    ] * 2  # fmt: skip
    assert seen[2] == []
    assert seen[3] == [
        Finding(
            "memory_creep",
            "warning",
            None,
            0,
            "device memory creeps: the window's peak allocated 11.20 GiB is 1.20 GiB (12%) "
            "above the 10.00 GiB of 2 windows earlier",
            CREEP_ACTION,
            {"peak_bytes": int(11.2 * GIB), "baseline_bytes": 10 * GIB,
             "rise_bytes": int(11.2 * GIB) - 10 * GIB, "share": pytest.approx(0.12),
             "windows": 2},
        )
    ]  # fmt: skip


def test_a_rise_of_a_gib_is_creep_below_the_share(run: Capture, allocator: Allocator) -> None:
    """40 GiB to 41.5 GiB is under 10 % but over 1 GiB: memory creep."""
    messages = []
    for gib in (40, 40, 41.5):
        allocator.use(0, 0)
        allocator.reset_peak_memory_stats()
        held(allocator, gib, 50)
        messages.append([f.message for f in found(window(run), ("memory_creep",))])
    assert messages[2] == [
        "device memory creeps: the window's peak allocated 41.50 GiB is 1.50 GiB (4%) above "
        "the 40.00 GiB of 1 window earlier"
    ]


def test_memory_pressure_names_the_share_of_the_device(run: Capture, allocator: Allocator) -> None:
    """75 of 80 GiB reserved is a warning; with allocator retries in the window, critical."""
    held(allocator, 60, 75)
    first = found(window(run), ("memory_pressure",))
    allocator.retries = 3
    second = found(window(run), ("memory_pressure",))
    assert first == [
        Finding(
            "memory_pressure",
            "warning",
            None,
            0,
            "the window's peak reserved 75.00 GiB is 94% of the device's 80.00 GiB",
            PRESSURE_ACTION,
            {"peak_reserved_bytes": 75 * GIB, "total_bytes": 80 * GIB,
             "share": pytest.approx(0.9375), "alloc_retries": 0, "ooms": 0},
        )
    ]  # fmt: skip
    assert [(f.severity, f.message) for f in second] == [
        (
            "critical",
            "the window's peak reserved 75.00 GiB is 94% of the device's 80.00 GiB; "
            "3 allocator retries, 0 OOMs",
        )
    ]


def test_memory_pressure_abstains_without_the_device_total(
    run: Capture, allocator: Allocator
) -> None:
    """A device whose total cannot be read: pressure is not judged, and says so."""
    allocator.total = None
    held(allocator, 79, 79)
    assert found(window(run), ("memory_pressure",)) == [
        Finding(
            "memory_pressure",
            "info",
            None,
            None,
            "device total memory unknown: pressure not judged",
            "",
            {"abstained": True},
        )
    ]


def test_a_throughput_drop_is_named_against_the_sustained_level(run: Capture) -> None:
    """A warm-up, 400 samples/s thrice, then 320 twice: 20 % below, from the second window."""
    samples = (100, 100, 100, 100, 80, 80)
    seen = [found(window(run, n), ("throughput_drop",)) for n in samples]
    assert [f.message for f in seen[0]] == ["a warm-up window: throughput drop not judged"]
    assert [f.message for f in seen[2]] == [
        "fewer than 3 windows after the warm-up: throughput drop not judged yet"
    ]
    assert seen[3] == seen[4] == []  # one window below the level is not yet a drop
    assert seen[5] == [
        Finding(
            "throughput_drop",
            "warning",
            "root.train",
            0,
            "root.train counted 320 samples/s, 20% below the run's sustained 400 samples/s "
            "(the median of 3 windows before it)",
            DROP_ACTION,
            {"unit": "samples", "per_s": 320.0, "sustained_per_s": 400.0,
             "drop": pytest.approx(0.2), "windows": 3},
        )
    ]  # fmt: skip


def test_a_small_dip_is_no_drop(run: Capture) -> None:
    """5 % below the median stays under the 10 % threshold; a lower threshold names it."""
    for samples in (100, 100, 100):
        window(run, samples)
    dipped = window(run, 95)
    assert found(dipped, ("throughput_drop",)) == []
    assert [
        f.kind
        for f in dipped.diagnosis(throughput_drop_share=0.04, throughput_drop_windows=1)
        if f.severity != "info"
    ] == ["throughput_drop"]


def test_the_warm_up_is_a_setting(allocator: Allocator) -> None:
    """warmup_windows=0 makes the first window the baseline; it must be a whole number >= 0."""
    cap = capture(trace_every=0, device_memory=True, diagnosis_thresholds={"warmup_windows": 0})
    try:
        held(allocator, 10)
        window(cap)
        allocator.reset_peak_memory_stats()
        held(allocator, 12)
        second = found(window(cap), ("memory_creep",))
    finally:
        cap.lt.shutdown()
    assert [f.message for f in second] == [
        "device memory creeps: the window's peak allocated 12.00 GiB is 2.00 GiB (20%) above "
        "the 10.00 GiB of 1 window earlier"
    ]
    with pytest.raises(ValueError, match=r"warmup_windows=-1 must be a whole number >= 0"):
        thresholds({"warmup_windows": -1})


def test_a_drop_that_lasts_stays_reported_until_it_recovers(run: Capture) -> None:
    """40 % slower from window 4 on: each slow window from the second warns; recovered, none."""
    samples = (100, 100, 100, 100, 60, 60, 60, 60, 60, 60, 100, 100)
    drops = [
        [(f.kind, f.path, f.rank) for f in found(window(run, n), ("throughput_drop",))]
        for n in samples
    ]
    slow = [("throughput_drop", "root.train", 0)]
    assert drops[4:] == [[]] + [slow] * 5 + [[], []]


def test_the_sustained_level_leaves_out_the_windows_of_a_drop() -> None:
    """Rates 40 % down join no reference, and count the drop's windows; a rise joins it."""
    assert sustained([100, 100, 60, 60, 60], 0.1) == ([100, 100], 3)
    assert sustained([100, 60], 0.1) == ([100, 60], 0)
    assert sustained([100, 100, 120, 95], 0.1) == ([100, 100, 120, 95], 0)
    assert sustained([100, 100, 60, 100, 60], 0.1) == ([100, 100, 100], 1)
