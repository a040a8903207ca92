"""What a span file costs at `trace_every=1`, and what it keeps.

Runs a loop of 20 sections per step as fast as looptrace goes (simulated time), every step
traced, three ways interleaved in one process: no span file; the span file as looptrace writes
it (its own writer thread, direct OTLP/JSON encoding, no span dropped); and the way it was
written before (the SDK's `BatchSpanProcessor` with its default 2048-span queue, protobuf
encoding and its JSON mapping). Prints microseconds per span on the training thread, per span
until everything is written (`shutdown()` included), and the spans in the file.

    python benchmarks/span_file.py [--steps 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import looptrace
from looptrace._export.otlp_json import to_json
from looptrace.testing import FakeClock


class _ProtobufJsonFile(SpanExporter):
    """The earlier span file: protobuf encoding, then protobuf's JSON mapping."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("ab")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        line = json.dumps(to_json(encode_spans(spans)), separators=(",", ":")) + "\n"
        self._file.write(line.encode())
        self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._file.close()


def _spans_in(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(
        len(scope["spans"])
        for line in path.read_text().splitlines()
        for resource in json.loads(line).get("resourceSpans", [])
        for scope in resource["scopeSpans"]
    )


def run(case: str, steps: int) -> tuple[float, float, int]:
    """Return (µs per span in the loop, µs per span until written, spans in the file)."""
    directory = Path(tempfile.mkdtemp(prefix="looptrace-bench-"))
    path = directory / "spans.jsonl"
    provider = TracerProvider()
    clock = FakeClock()
    options = {"trace_file": path} if case == "looptrace file" else {}
    if case == "BatchSpanProcessor file":
        provider.add_span_processor(BatchSpanProcessor(_ProtobufJsonFile(path)))
    lt = looptrace.configure(tracer_provider=provider, clock=clock, trace_every=1, **options)
    train = lt.timer("train")
    start = time.perf_counter()
    for _ in range(steps):
        for section in range(20):
            train.record(f"s{section}")
            clock.advance(0.001)
        train.record()
    train.stop()
    loop = time.perf_counter() - start
    lt.shutdown()
    provider.shutdown()
    total = time.perf_counter() - start
    spans = 21 * steps + 1
    return loop / spans * 1e6, total / spans * 1e6, _spans_in(path)


def main() -> None:
    """Run the cases interleaved and print the best of each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cases = ["no file", "looptrace file", "BatchSpanProcessor file"]
    results: dict[str, list[tuple[float, float, int]]] = {case: [] for case in cases}
    for _ in range(args.rounds):
        for case in cases:
            results[case].append(run(case, args.steps))
    spans = 21 * args.steps + 1
    print(f"{args.steps} steps of 20 sections, every step traced: {spans} spans")
    for case, rows in results.items():
        loop = min(r[0] for r in rows)
        total = min(r[1] for r in rows)
        kept = min(r[2] for r in rows)
        print(f"{case:25} {loop:6.1f} µs/span in the loop, {total:6.1f} written, kept {kept}")


if __name__ == "__main__":
    main()
