"""A generated job's files, as looptrace's writers lay them out, for `benchmarks/offline.py`.

Every rank traces one step of `SECTIONS` sections every `TRACE_EVERY_S` seconds (one span
line per traced step, as the span file's writer batches it) and closes one window every
`WINDOW_S` seconds (one snapshot line of `SECTIONS + 1` paths with their buckets). At the
defaults that is about 215 spans and 10 windows a second for 1,024 ranks.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SECTIONS = 20
TRACE_EVERY_S = 100.0  # one traced step per rank every 100 s: ~215 spans/s for 1,024 ranks
WINDOW_S = 100.0  # one window per rank every 100 s: ~37,000 windows an hour for 1,024 ranks
STEP_S = 0.5
EPOCH_NS = 1_767_225_600 * 10**9
BUCKETS = 47


def _value(value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": str(value)}


def _attributes(pairs: dict[str, object]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _value(value)} for key, value in pairs.items()]


def _resource(rank: int, world: int) -> dict[str, Any]:
    return {
        "attributes": _attributes(
            {
                "telemetry.sdk.language": "python",
                "telemetry.sdk.name": "opentelemetry",
                "service.instance.id": f"instance-{rank:08x}",
                "service.name": "bench",
                "host.name": f"node{rank // 8}",
                "looptrace.rank": rank,
                "looptrace.world_size": world,
            }
        )
    }


def _span_line(rank: int, world: int, step: int, rng: random.Random) -> bytes:
    """Return the span line of one traced step: the lap and its sections."""
    trace = f"{rng.getrandbits(128):032x}"
    root = f"{rng.getrandbits(64):016x}"
    start = EPOCH_NS + int(step * STEP_S * 1e9)
    spans = []
    at = start
    for index in range(SECTIONS):
        length = int(STEP_S * 1e9 / SECTIONS * rng.uniform(0.5, 1.5))
        spans.append(
            {
                "traceId": trace,
                "spanId": f"{rng.getrandbits(64):016x}",
                "parentSpanId": root,
                "name": f"section{index:02d}",
                "kind": 1,
                "startTimeUnixNano": str(at),
                "endTimeUnixNano": str(at + length),
                "attributes": _attributes(
                    {
                        "looptrace.path": f"root.train.section{index:02d}",
                        "looptrace.rank": rank,
                        "looptrace.world_size": world,
                        "looptrace.step": step,
                    }
                ),
                "status": {},
                "flags": 256,
            }
        )
        at += length
    spans.append(
        {
            "traceId": trace,
            "spanId": root,
            "name": "train",
            "kind": 1,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(at),
            "attributes": _attributes(
                {
                    "looptrace.path": "root.train",
                    "looptrace.rank": rank,
                    "looptrace.world_size": world,
                    "looptrace.step": step,
                    "thread.id": 140000000000000,
                    "thread.name": "MainThread",
                }
            ),
            "status": {},
            "flags": 256,
        }
    )
    request = {
        "resourceSpans": [
            {
                "resource": _resource(rank, world),
                "scopeSpans": [
                    {"scope": {"name": "looptrace", "version": "0.2.0"}, "spans": spans}
                ],
            }
        ]
    }
    return json.dumps(request, separators=(",", ":")).encode() + b"\n"


def _stats(count: int, mean: float, rng: random.Random) -> dict[str, Any]:
    buckets = [0] * BUCKETS
    buckets[20 + rng.randrange(5)] = count
    return {
        "count": count,
        "total": count * mean,
        "mean": mean,
        "min": mean * 0.5,
        "max": mean * 1.5,
        "std": mean * 0.1,
        "p50": mean,
        "p90": mean * 1.2,
        "p99": mean * 1.4,
        "self_time": count * mean,
        "errors": 0,
        "buckets": buckets,
    }


def _window_line(rank: int, world: int, index: int, rng: random.Random) -> bytes:
    """Return the snapshot line of one window of one rank."""
    steps = int(WINDOW_S / STEP_S)
    start = EPOCH_NS + int(index * WINDOW_S * 1e9)
    stats = {"root.train": _stats(steps, STEP_S, rng)}
    for section in range(SECTIONS):
        stats[f"root.train.section{section:02d}"] = _stats(
            steps, STEP_S / SECTIONS * rng.uniform(0.9, 1.1), rng
        )
    record = {
        "kind": "looptrace.snapshot",
        "version": 1,
        "step": (index + 1) * steps,
        "time": (start + int(WINDOW_S * 1e9)) / 1e9,
        "start_ns": start,
        "end_ns": start + int(WINDOW_S * 1e9),
        "rank": rank,
        "world_size": world,
        "host": f"node{rank // 8}",
        "writer": f"{rank:016x}",
        "window": index,
        "stats": stats,
        "steps": [index * steps, (index + 1) * steps],
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def write_job(directory: Path, ranks: int, seconds: float, seed: int = 0) -> dict[str, int]:
    """Write every rank's span and snapshot files of `seconds` of a job; return the counts."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    traced = int(seconds / TRACE_EVERY_S)
    windows = int(seconds / WINDOW_S)
    for rank in range(ranks):
        with (directory / f"spans.rank{rank}.jsonl").open("wb") as spans:
            for i in range(traced):
                step = int(i * TRACE_EVERY_S / STEP_S) + rank % 7
                spans.write(_span_line(rank, ranks, step, rng))
        with (directory / f"snapshots.rank{rank}.jsonl").open("wb") as snapshots:
            for index in range(windows):
                snapshots.write(_window_line(rank, ranks, index, rng))
    return {
        "ranks": ranks,
        "spans": ranks * traced * (SECTIONS + 1),
        "windows": ranks * windows,
        "paths": SECTIONS + 1,
    }


def write_many_windows(path: Path, windows: int, seed: int = 0) -> int:
    """Write one rank's snapshot file of `windows` windows (a job that resets every step)."""
    rng = random.Random(seed)
    with path.open("wb") as handle:
        for index in range(windows):
            handle.write(_window_line(0, 1, index, rng))
    return windows


def write_one_long_line(path: Path, spans: int, seed: int = 0) -> int:
    """Write one span line holding about `spans` spans (one request of a whole run)."""
    rng = random.Random(seed)
    lines = [json.loads(_span_line(0, 1, step, rng)) for step in range(spans // (SECTIONS + 1))]
    merged = lines[0]
    target = merged["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for other in lines[1:]:
        target += other["resourceSpans"][0]["scopeSpans"][0]["spans"]
    path.write_bytes(json.dumps(merged, separators=(",", ":")).encode() + b"\n")
    return len(target)
