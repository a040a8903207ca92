"""Sections as torch.profiler (Kineto) ranges, on the CPU, and the NVTX switch."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from looptrace import ConfigError
from looptrace._core import ranges as _ranges
from looptrace.testing import Capture

torch = pytest.importorskip("torch", reason="the profiler ranges need torch (the test extra)")
profiler = pytest.importorskip("looptrace.integrations.profiler")

SECTIONS = ("root.train", "root.train.data", "root.train.forward", "root.train.backward")


def _steps(cap: Capture, steps: int) -> None:
    train = cap.lt.timer("train")
    weights = torch.ones(8, 8, requires_grad=True)
    for step in range(steps):
        if step:
            train.record()  # the previous step ends, this one starts
        train.record("data")
        batch = torch.randn(4, 8)
        train.record("forward")
        loss = (batch @ weights).sum()
        train.record("backward")
        loss.backward()
        with train.section("optimizer"):
            weights.grad = None
    train.stop()


def test_sections_are_ranges_in_prof_events_while_a_profiler_records(cap: Capture) -> None:
    """Each section instance is one `record_function` event named by its path."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        _steps(cap, 3)
    counts = Counter(event.name for event in prof.events() if event.name.startswith("root."))
    assert counts == {
        "root.train": 3,
        "root.train.data": 3,
        "root.train.forward": 3,
        "root.train.backward": 3,
        "root.train.optimizer": 3,
    }
    assert _ranges.OPEN == {}
    # The aggregates are the same as without the profiler: one count per section instance.
    assert {p: s.count for p, s in cap.lt.reset().items()} == {
        "root.train": 3,
        "root.train.backward": 3,
        "root.train.data": 3,
        "root.train.forward": 3,
        "root.train.optimizer": 3,
    }


def test_chrome_trace_nests_operators_inside_their_section(cap: Capture, tmp_path: Path) -> None:
    """The exported Chrome trace has the ranges, and `aten::mm` lies inside `forward`."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        _steps(cap, 2)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events: list[dict[str, Any]] = [
        e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"
    ]
    by_name = Counter(e["name"] for e in events if e["name"].startswith("root."))
    assert {name: by_name[name] for name in SECTIONS} == dict.fromkeys(SECTIONS, 2)
    forwards = [e for e in events if e["name"] == "root.train.forward"]
    laps = [e for e in events if e["name"] == "root.train"]
    for forward in forwards:
        assert any(_inside(forward, lap) for lap in laps)
        assert any(e["name"] == "aten::mm" and _inside(e, forward) for e in events)


def _inside(inner: dict[str, Any], outer: dict[str, Any]) -> bool:
    start, end = float(inner["ts"]), float(inner["ts"]) + float(inner["dur"])
    return float(outer["ts"]) <= start and end <= float(outer["ts"]) + float(outer["dur"])


def test_profiler_started_mid_step_ranges_only_the_sections_it_sees(cap: Capture) -> None:
    """A section already running when profiling starts gets no range; later ones do."""
    train = cap.lt.timer("train")
    train.record("data")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        train.record("forward")
        train.record()
    train.record("data")  # after the profiler: no range, and nothing left open
    train.stop()
    names = Counter(e.name for e in prof.events() if e.name.startswith("root."))
    assert names == {"root.train.forward": 1, "root.train": 1}
    assert _ranges.OPEN == {}


def test_no_range_is_opened_without_a_profiler(cap: Capture) -> None:
    """With no profiler running, sections open nothing and take their usual path."""
    assert not profiler.ranges_active()
    _steps(cap, 2)
    assert _ranges.OPEN == {}
    assert cap.lt.reset()["root.train.forward"].count == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a torch build without CUDA")
def test_nvtx_ranges_on_a_cpu_build_is_a_config_error() -> None:
    """Asking for NVTX ranges where torch cannot make them names the problem."""
    with pytest.raises(ConfigError, match=r"nvtx_ranges\(\): this torch cannot open NVTX"):
        profiler.nvtx_ranges()
    assert not _ranges.gate.nvtx
    profiler.nvtx_ranges(False)
    assert not profiler.ranges_active()


def test_deploy_train_torch_profile_writes_a_trace_with_the_sections(tmp_path: Path) -> None:
    """`deploy/train.py --torch-profile` records steps 5-7; each is a lap with its sections."""
    import subprocess
    import sys

    trace = tmp_path / "trace.json"
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parent.parent / "deploy" / "train.py"),
            "--steps",
            "8",
            "--data-ms",
            "1",
            "--torch-profile",
            str(trace),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    events = json.loads(trace.read_text())["traceEvents"]
    names = Counter(
        e["name"] for e in events if e.get("ph") == "X" and e["name"].startswith("root.")
    )
    assert {name: names[name] for name in (*SECTIONS, "root.train.optimizer")} == {
        "root.train": 3,
        "root.train.data": 3,
        "root.train.forward": 3,
        "root.train.backward": 3,
        "root.train.optimizer": 3,
    }


def test_import_looptrace_imports_no_host_framework() -> None:
    """`import looptrace` (and the integrations package) loads no framework; modules do, lazily."""
    import subprocess
    import sys

    program = (
        "import sys, looptrace, looptrace.integrations, looptrace.integrations.profiler\n"
        "hosts = {'torch', 'lightning', 'transformers', 'mlflow', 'wandb', 'tensorboard'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & hosts))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
