"""Many rank processes, one OTLP receiver: one trace per step, the same steps on every rank."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from .helpers.otlp_server import OtlpReceiver
from .helpers.processes import bare_env

RANK_LOOP = """
    import json, sys
    import looptrace
    from looptrace.testing import FakeClock

    endpoint, steps, sections, every = sys.argv[1], *map(int, sys.argv[2:5])
    clock = FakeClock()
    lt = looptrace.configure(clock=clock, otlp_endpoint=endpoint, trace_every=every)
    train = lt.timer("train")
    for step in range(steps):
        for i in range(sections):
            train.record(f"s{i}")
            clock.advance(0.001 * (1 + lt.rank.rank))
        if step < steps - 1:
            train.record()
        else:
            train.stop()
    print(json.dumps({path: stats.count for path, stats in lt.reset().items()}))
    lt.shutdown()
"""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """Yield an OTLP/HTTP receiver on 127.0.0.1."""
    with OtlpReceiver("http/protobuf") as rx:
        yield rx


def run_ranks(
    receiver: OtlpReceiver, world: int, steps: int, sections: int, every: int
) -> list[dict[str, int]]:
    """Run `world` rank processes (torchrun's variables) and return each one's counts."""
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(RANK_LOOP),
                receiver.endpoint,
                str(steps),
                str(sections),
                str(every),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **bare_env(),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world),
                "TORCHELASTIC_RUN_ID": "run-ranks-test",
            },
        )
        for rank in range(world)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        results.append(json.loads(out.splitlines()[-1]))
    return results


def traces(receiver: OtlpReceiver) -> dict[str, list[dict[str, Any]]]:
    """Group the received spans by trace id."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in receiver.spans:
        grouped[span["trace_id"]].append(span)
    return grouped


def test_four_ranks_share_one_trace_per_step_with_no_orphans(receiver: OtlpReceiver) -> None:
    """Every traced step is one trace holding all 4 ranks; rank 0's lap is the root."""
    world, steps, sections = 4, 5, 3
    run_ranks(receiver, world, steps, sections, every=1)
    assert receiver.wait_for_spans(world * steps * (sections + 1))
    by_trace = traces(receiver)
    assert len(by_trace) == steps
    for spans in by_trace.values():
        assert len(spans) == world * (sections + 1)
        ids = {span["span_id"] for span in spans}
        laps = {
            span["attributes"]["looptrace.rank"]: span for span in spans if span["name"] == "train"
        }
        assert sorted(laps) == list(range(world))
        assert {span["attributes"]["looptrace.step"] for span in spans} == {
            laps[0]["attributes"]["looptrace.step"]
        }
        assert laps[0]["parent"] is None  # the root of the step
        for rank in range(1, world):
            assert laps[rank]["parent"] == laps[0]["span_id"]
        for span in spans:
            if span["name"] != "train":
                rank = span["attributes"]["looptrace.rank"]
                assert span["parent"] == laps[rank]["span_id"]
            assert span["parent"] is None or span["parent"] in ids  # no orphan


def test_eight_ranks_trace_the_same_sampled_steps_and_count_everything(
    receiver: OtlpReceiver,
) -> None:
    """8 ranks x 20 sections x 200 steps, trace_every=50: exactly steps 0, 50, 100, 150."""
    world, steps, sections = 8, 200, 20
    counts = run_ranks(receiver, world, steps, sections, every=50)
    expected = {"root.train": steps, **{f"root.train.s{i}": steps for i in range(sections)}}
    assert counts == [expected] * world  # aggregation saw every section on every rank
    traced = [0, 50, 100, 150]
    assert receiver.wait_for_spans(world * len(traced) * (sections + 1))
    by_trace = traces(receiver)
    assert len(receiver.spans) == world * len(traced) * (sections + 1)
    assert (
        sorted(
            {span["attributes"]["looptrace.step"] for spans in by_trace.values() for span in spans}
        )
        == traced
    )
    assert sorted(
        len({span["attributes"]["looptrace.rank"] for span in spans}) for spans in by_trace.values()
    ) == [world] * len(traced)
