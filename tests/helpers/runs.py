"""Recorded runs for the offline tests: a looptrace on a fake clock writing its files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from looptrace import RankInfo, configure
from looptrace._configure import looptrace_resource
from looptrace.testing import FakeClock


@dataclass
class Run:
    """What a recorded run wrote, and the spans it produced (kept in memory too)."""

    span_file: Path
    snapshot_file: Path
    spans: list[ReadableSpan]


def record_run(
    directory: Path,
    *,
    rank: int = 0,
    world_size: int = 1,
    data_ms: Sequence[float] = (10, 20, 30, 40),
    forward_ms: float = 50,
    reset_every: int = 2,
) -> Run:
    """Time one step per entry of `data_ms`: `data` then `forward`, resetting every few steps.

    Spans go to `directory/spans.jsonl` (per rank: `spans.rank<N>.jsonl` when `world_size`
    > 1) and snapshots likewise; the clock starts at the same epoch on every rank.
    """
    clock = FakeClock(start_s=0.0)
    info = RankInfo(rank=rank, world_size=world_size)
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=looptrace_resource("looptrace-test", info))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    lt = configure(
        clock=clock,
        rank=info,
        tracer_provider=provider,
        trace_every=1,
        trace_file=directory / "spans.jsonl",
        snapshot_file=directory / "snapshots.jsonl",
    )
    train = lt.timer("training")
    steps = len(data_ms)
    for step, data in enumerate(data_ms, 1):
        train.record("data")
        clock.advance(data / 1000)
        train.record("forward")
        clock.advance(forward_ms / 1000)
        if step < steps:
            train.record()
        else:
            train.stop()
        if step % reset_every == 0:
            lt.reset()
    lt.shutdown()
    provider.shutdown()
    suffix = f".rank{rank}" if world_size > 1 else ""
    return Run(
        span_file=directory / f"spans{suffix}.jsonl",
        snapshot_file=directory / f"snapshots{suffix}.jsonl",
        spans=list(memory.get_finished_spans()),
    )
