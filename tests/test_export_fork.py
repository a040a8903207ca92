"""A forked child (a DataLoader worker) records and resets with exporters configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .helpers.otlp_server import OtlpReceiver
from .helpers.processes import bare_env

PROGRAM = """
    import json, os, sys
    import looptrace
    from looptrace.testing import FakeClock

    clock = FakeClock()
    lt = looptrace.configure(
        clock=clock, otlp_endpoint=sys.argv[1], otlp_protocol=sys.argv[2], otlp_timeout=2.0
    )
    train = lt.timer("train")
    train.record("data")
    clock.advance(1.0)
    pipeline = lt._outputs.on_reset[-1].__self__
    with pipeline.histograms.lock, lt._engine.state().lock:  # held while forking
        pid = os.fork()
    if pid == 0:
        train.record("worker"); clock.advance(0.5); train.stop()
        loader = lt.timer("loader")  # a new outermost lap: the child's own trace
        loader.record(); clock.advance(0.25); loader.stop()
        snapshot = lt.reset()
        lt.shutdown()
        print(json.dumps({p: [s.count, s.total] for p, s in snapshot.items()}), flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    clock.advance(1.0)
    train.stop()
    snapshot = lt.reset()
    lt.shutdown()
    print(json.dumps({p: [s.count, s.total] for p, s in snapshot.items()}))
    print(status, lt.health().dropped_spans)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_forked_child_with_exporters_records_and_resets(protocol: str) -> None:
    """The child starts empty and does not hang; the parent's numbers and exports are intact."""
    with OtlpReceiver(protocol) as rx:
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(PROGRAM), rx.endpoint, protocol],
            capture_output=True,
            check=False,
            text=True,
            timeout=60,
            env=bare_env(),
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert rx.wait_for_metrics(lambda m: "root.train" in m["looptrace.section.duration"])
    child, parent, status = result.stdout.splitlines()
    assert json.loads(child) == {
        "root.loader": [1, 0.25],
        "root.train": [1, 0.5],
        "root.train.data": [1, 0.0],
        "root.train.worker": [1, 0.5],
    }
    assert json.loads(parent) == {"root.train": [1, 2.0], "root.train.data": [1, 2.0]}
    assert status == "0 0"
    # The parent's spans, and the child's own lap, exported by the child.
    assert sorted((s["name"], round((s["end"] - s["start"]) / 1e9, 9)) for s in rx.spans) == [
        ("data", 2.0),
        ("loader", 0.25),
        ("train", 2.0),
    ]
    pushed = rx.latest_metrics()["looptrace.section.duration"]
    assert {path: (p["count"], p["sum"]) for path, p in pushed.items() if path[0] != "_"} == {
        "root.train": (1, 2.0),
        "root.train.data": (1, 2.0),
    }
