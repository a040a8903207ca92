"""Scale, part 2: OTLP load of N rank processes exporting to a real OTLP/HTTP receiver."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from typing import Any

from scale_common import DEFAULT_EVERY, PACE_S, RESET_EVERY, SECTIONS, STEP_S, WORKER


def export_worker(endpoint: str, steps: int, every: int) -> None:
    """One rank: `steps` steps of SECTIONS sections on a fake clock, reset every RESET_EVERY."""
    import looptrace
    from looptrace.testing import FakeClock

    clock = FakeClock()
    lt = looptrace.configure(
        clock=clock, otlp_endpoint=endpoint, trace_every=every if every else None
    )
    train = lt.timer("train")
    for step in range(steps):
        for i in range(SECTIONS):
            train.record(f"section{i:02d}")
            clock.advance(STEP_S / SECTIONS)
        if step < steps - 1:
            train.record()
        else:
            train.stop()
        time.sleep(PACE_S)
        if step % RESET_EVERY == RESET_EVERY - 1:
            lt.reset()
    lt.reset()
    health = lt.health()
    lt.shutdown()
    print(json.dumps({"dropped": health.dropped_spans}))


def measure_export(ranks: int, steps: int, every: int) -> dict[str, Any]:
    """Run `ranks` rank processes against one OTLP/HTTP receiver; return rates per rank."""
    from tests.helpers.otlp_server import OtlpReceiver

    with OtlpReceiver("http/protobuf") as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LOOPTRACE_"))}
        procs = [
            subprocess.Popen(
                [*WORKER, "--export-worker", receiver.endpoint, str(steps), str(every)],
                env={
                    **env,
                    "RANK": str(r),
                    "LOCAL_RANK": str(r),
                    "WORLD_SIZE": str(ranks),
                    "TORCHELASTIC_RUN_ID": "scale",
                },
                stdout=subprocess.PIPE,
                text=True,
            )
            for r in range(ranks)
        ]
        dropped = 0
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            if proc.returncode:
                raise RuntimeError("an exporting rank failed")
            dropped += json.loads(out.splitlines()[-1])["dropped"]
        spans = receiver.span_count
        span_bytes = sum(r.ByteSize() for r in receiver.trace_requests)
        # bytes of one rank's export at a reset (cumulative: the same size every window)
        per_reset = statistics.fmean(r.ByteSize() for r in receiver.metric_requests)
        traced_steps = len({s["attributes"]["looptrace.step"] for s in receiver.spans})
    seconds = steps * STEP_S
    per_step = spans / max(traced_steps, 1) / ranks
    return {
        "ranks": ranks,
        "steps": steps,
        "traced_steps": traced_steps,
        "dropped": dropped,
        "spans_per_s_per_rank": spans / seconds / ranks,
        "span_bytes_per_s_per_rank": span_bytes / seconds / ranks,
        "bytes_per_span": span_bytes / max(spans, 1),
        "metric_bytes_per_reset_per_rank": per_reset,
        "metric_bytes_per_s_per_rank": per_reset / (RESET_EVERY * STEP_S),
        "spans_per_traced_step_per_rank": per_step,
        # past the first steps: one traced step per `every` (DEFAULT_EVERY by default)
        "steady_spans_per_s_per_rank": per_step / (every or DEFAULT_EVERY) / STEP_S,
    }
