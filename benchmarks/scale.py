"""Scale: what a job's ranks move between themselves and send to the backend, as the job grows.

Three measurements, each on real parts of this machine, then extrapolated to 1,024 and 16,384
ranks:

1. `reset(across_ranks=True)`: time and bytes per rank for worlds of 2 to 16 gloo processes,
   the all_reduce design next to the all_gather design it replaced (kept in
   `scale_gathered.py`, for comparison only). Bytes are counted at the collective calls: for an
   all_reduce the tensor a rank passes in and gets back, for an all_gather what it receives.
2. OTLP load: N rank processes (`RANK`/`WORLD_SIZE` set, a fake clock at 1 step per second, 20
   sections per step) export to a real OTLP/HTTP receiver (tests/otlp_server.py) at the
   default sampling and at `trace_every=1`; spans and protobuf bytes per second per rank, the
   burst of one traced step over the job, against deploy/'s collector gateway settings.
3. Prometheus: the series one rank's endpoint serves for 20 sections (scraped for real), per
   rank and per job, against the limits of deploy/'s Prometheus config.

    python benchmarks/scale.py            # full run: worlds 2, 4, 8, 16; 8 exporting ranks
    python benchmarks/scale.py --quick    # CI: worlds 2, 4; 2 exporting ranks; about a minute

Times on a small shared machine with more processes than cores grow with the world size for
reasons a cluster does not have (the processes share the cores); the fits below say how the
measured times grow here, while the byte counts are exact and independent of the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from scale_gathered import gathered_bytes, gathered_local_ms, gathered_reduce, same_spreads

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/otlp_server.py, when run as `python benchmarks/scale.py`

PATHS = 100  # section paths of the reset measurement: the 1,024 x 100 example of the design
SECTIONS = 20  # sections per step of the export and Prometheus measurements
STEP_S = 1.0
RESET_EVERY = 100  # steps per window, as in the README's loop
# A real pause per step: with the fake clock alone a rank would make its spans faster than a
# batch span processor drains its queue, and drop them, which no rank at 1 step/s does.
PACE_S = 0.004
DEFAULT_EVERY = 100  # the default sampling past the first 10 steps
EXTRAPOLATE = (1024, 16384)
WORKER = (sys.executable, __file__)
GATEWAY = ROOT / "deploy" / "collector" / "gateway.yaml"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"


# -- 1. reset(across_ranks=True): one rank process ------------------------------------------


def section_names() -> list[str]:
    """Return PATHS - 1 section names of a realistic length (the lap itself is the last path)."""
    kinds = ("data", "forward", "backward", "optimizer", "allreduce")
    return [f"layer{i // len(kinds):02d}_{kinds[i % len(kinds)]}" for i in range(PATHS - 1)]


def reset_worker(store: str, out: str, rounds: int) -> None:
    """One rank: time both designs on the same window, alternating which goes first."""
    import torch.distributed as dist

    import looptrace
    from looptrace._distributed import collectives as _collectives
    from looptrace.testing import FakeClock

    info = looptrace.RankInfo.from_env()
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=info.rank, world_size=info.world_size
    )
    clock = FakeClock()
    lt = looptrace.configure(
        clock=clock, rank=info, traces_exporter="none", metrics_exporter="none", trace_every=0
    )
    train, names = lt.timer("train"), section_names()

    def window() -> Any:
        for name in names:
            train.record(name)
            clock.advance(0.001 * (1 + (info.rank + len(name)) % 5))
        train.record()
        return lt.reset()

    lt.reset(across_ranks=True)  # the first window agrees on the path table: not timed
    _collectives.reduce(window())
    times: dict[str, list[float]] = {"all_reduce": [], "all_gather": []}
    moved: dict[str, list[int]] = {}
    mismatches = 0
    for i in range(rounds):
        snapshot = window()
        order = ["all_reduce", "all_gather"] if i % 2 == 0 else ["all_gather", "all_reduce"]
        results = {}
        for design in order:
            dist.barrier()
            before = (_collectives.TRAFFIC.calls, _collectives.TRAFFIC.bytes)
            gathered = [0, 0]
            start = time.perf_counter_ns()
            if design == "all_reduce":
                results[design] = _collectives.reduce(snapshot)
            else:
                results[design] = gathered_reduce(snapshot, gathered)
            times[design].append((time.perf_counter_ns() - start) / 1e6)
            if design == "all_reduce":
                after = (_collectives.TRAFFIC.calls, _collectives.TRAFFIC.bytes)
                moved[design] = [after[0] - before[0], after[1] - before[1]]
            else:
                moved[design] = gathered
        mismatches += not same_spreads(results["all_reduce"], results["all_gather"])
    dist.barrier()
    dist.destroy_process_group()
    Path(out).write_text(json.dumps({"ms": times, "moved": moved, "mismatches": mismatches}))


def measure_reset(worlds: list[int], rounds: int) -> dict[str, Any]:
    """Run a job per world size; return per design the median of the slowest rank per round."""
    by_world = {}
    for world in worlds:
        with tempfile.TemporaryDirectory() as tmp:
            procs = [
                subprocess.Popen(
                    [*WORKER, "--reset-worker", f"{tmp}/store", f"{tmp}/{r}", str(rounds)],
                    env={
                        **os.environ,
                        "RANK": str(r),
                        "WORLD_SIZE": str(world),
                        "GLOO_SOCKET_IFNAME": "lo",
                        "OMP_NUM_THREADS": "1",
                    },
                )
                for r in range(world)
            ]
            if any(p.wait(timeout=600) for p in procs):
                raise RuntimeError(f"a rank of the {world}-rank job failed")
            ranks = [json.loads(Path(f"{tmp}/{r}").read_text()) for r in range(world)]
        entry: dict[str, Any] = {"mismatches": sum(r["mismatches"] for r in ranks)}
        for design in ("all_reduce", "all_gather"):
            slowest = [max(r["ms"][design][i] for r in ranks) for i in range(rounds)]
            calls, moved = ranks[0]["moved"][design]
            entry[design] = {"ms": statistics.median(slowest), "calls": calls, "bytes": moved}
        by_world[world] = entry
    paths = ["root.train", *(f"root.train.{n}" for n in section_names())]
    local = {world: gathered_local_ms(paths, world, max(1, rounds // 10)) for world in EXTRAPOLATE}
    return {"worlds": by_world, "fits": fits(by_world), "all_gather_local_ms": local}


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Return (a, b) of the least-squares line y = a + b x."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def fits(by_world: dict[int, Any]) -> dict[str, Any]:
    """Fit ms against the world size (linear and log2) and extrapolate both designs."""
    worlds = sorted(by_world)
    result: dict[str, Any] = {}
    paths = ["root.train", *(f"root.train.{n}" for n in section_names())]
    for design in ("all_reduce", "all_gather"):
        ms = [by_world[w][design]["ms"] for w in worlds]
        linear = fit([float(w) for w in worlds], ms)
        log = fit([math.log2(w) for w in worlds], ms)
        at = {}
        for world in EXTRAPOLATE:
            moved = (
                by_world[worlds[-1]][design]["bytes"]
                if design == "all_reduce"
                else gathered_bytes(world, paths)
            )
            at[world] = {
                "ms_linear": linear[0] + linear[1] * world,
                "ms_log2": log[0] + log[1] * math.log2(world),
                "bytes": moved,
            }
        result[design] = {"linear": linear, "log2": log, "at": at}
    return result


# -- 2. OTLP load: one rank process ---------------------------------------------------------


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
    from tests.otlp_server import OtlpReceiver

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


# -- 3. Prometheus series of one rank --------------------------------------------------------


def measure_series() -> dict[str, Any]:
    """Serve one rank's endpoint for SECTIONS sections, scrape it, count series per family."""
    from tests.otlp_server import free_port

    import looptrace
    from looptrace.testing import FakeClock

    port, clock = free_port(), FakeClock()
    lt = looptrace.configure(
        clock=clock, prometheus=port, traces_exporter="none", metrics_exporter="prometheus"
    )
    train = lt.timer("train")
    for _ in range(3):
        for i in range(SECTIONS):
            train.record(f"section{i:02d}")
            clock.advance(STEP_S / SECTIONS)
        train.record()
    lt.reset()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    lt.shutdown()
    families: dict[str, int] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            families[name] = families.get(name, 0) + 1
    return {"paths": SECTIONS + 1, "series": sum(families.values()), "families": families}


# -- deploy/ settings and the report ---------------------------------------------------------


def deploy_limits() -> dict[str, Any]:
    """Return the gateway's batch and memory settings and Prometheus's per-target limits."""
    gateway = yaml.safe_load(GATEWAY.read_text())["processors"]
    prometheus = yaml.safe_load(PROMETHEUS.read_text())
    (job,) = [j for j in prometheus["scrape_configs"] if j["job_name"] == "looptrace"]
    return {
        "batch": gateway["batch"],
        "memory_limiter": gateway["memory_limiter"],
        "tail_sampling": {
            k: gateway["tail_sampling"][k]
            for k in ("decision_wait", "num_traces", "expected_new_traces_per_sec")
        },
        "scrape_interval": prometheus["global"]["scrape_interval"],
        "sample_limit": job.get("sample_limit"),
        "label_limit": job.get("label_limit"),
    }


def load(export: dict[str, Any], series: dict[str, Any], limits: dict[str, Any]) -> dict:
    """Extrapolate the measured per-rank rates to the job sizes of EXTRAPOLATE.

    Rates are those past the first steps (one traced step per DEFAULT_EVERY at the default
    sampling), from the measured spans per traced step and bytes per span; metric bytes are
    the measured ones, with a reset every RESET_EVERY steps.
    """
    scrape_s = float(str(limits["scrape_interval"]).removesuffix("s"))
    wait_s = float(str(limits["tail_sampling"]["decision_wait"]).removesuffix("s"))
    result: dict[str, Any] = {}
    for world in EXTRAPOLATE:
        entry = {}
        for name, rates in export.items():
            spans_s = rates["steady_spans_per_s_per_rank"] * world
            span_bytes_s = spans_s * rates["bytes_per_span"]
            metric_bytes_s = rates["metric_bytes_per_s_per_rank"] * world
            burst = rates["spans_per_traced_step_per_rank"] * world
            entry[name] = {
                "spans_per_s": spans_s,
                "span_MB_per_s": span_bytes_s / 1e6,
                "metric_MB_per_s": metric_bytes_s / 1e6,
                "spans_per_hour": spans_s * 3600,
                "GB_per_hour": (span_bytes_s + metric_bytes_s) * 3600 / 1e9,
                "burst_spans": burst,
                "burst_MB": burst * rates["bytes_per_span"] / 1e6,
                "burst_batches": burst / limits["batch"]["send_batch_size"],
                # what the gateway holds for the tail-sampling decision at the worst moment
                "held_spans": max(burst, spans_s * wait_s),
                "held_MB_wire": max(burst, spans_s * wait_s) * rates["bytes_per_span"] / 1e6,
            }
        served = any("window" in family for family in series["families"])
        with_quantiles = series["series"] + (0 if served else 3 * series["paths"])
        entry["series"] = {
            "per_rank": series["series"],
            "per_rank_with_quantiles": with_quantiles,
            "job": with_quantiles * world,
            "samples_per_hour": with_quantiles * world * 3600 / scrape_s,
            "over_sample_limit": with_quantiles * world > (limits["sample_limit"] or math.inf),
        }
        result[world] = entry
    return result


def print_report(report: dict[str, Any]) -> None:
    """Print the figures as plain tables."""
    reset = report["reset"]
    print(f"reset(across_ranks=True), {PATHS} paths: median of the slowest rank, bytes per rank")
    print(f"{'world':>6} {'all_reduce ms':>14} {'bytes':>8} {'all_gather ms':>14} {'bytes':>10}")
    for world, entry in reset["worlds"].items():
        new, old = entry["all_reduce"], entry["all_gather"]
        print(
            f"{world:>6} {new['ms']:>14.2f} {new['bytes']:>8} {old['ms']:>14.2f} {old['bytes']:>10}"
            + (f"  MISMATCHES {entry['mismatches']}" if entry["mismatches"] else "")
        )
    for design, f in reset["fits"].items():
        for world, at in f["at"].items():
            print(
                f"  {design} at {world}: {at['ms_linear']:.1f} ms (linear fit), "
                f"{at['ms_log2']:.1f} ms (log2 fit), {at['bytes'] / 1e6:.3f} MB per rank"
            )
    for world, ms in reset["all_gather_local_ms"].items():
        print(f"  all_gather design's local decoding and reduction alone at {world}: {ms:.0f} ms")
    print("\nOTLP export per rank (1 step/s, 20 sections/step), measured")
    for name, rates in report["export"].items():
        print(
            f"  {name}: {rates['ranks']} ranks x {rates['steps']} steps, "
            f"{rates['spans_per_s_per_rank']:.3f} spans/s, "
            f"{rates['span_bytes_per_s_per_rank']:.0f} B/s spans, "
            f"{rates['metric_bytes_per_s_per_rank']:.0f} B/s metrics, "
            f"{rates['bytes_per_span']:.0f} B/span, dropped {rates['dropped']}"
        )
    print(f"\nPrometheus, one rank with {report['series']['paths']} paths")
    print(f"  {report['series']['series']} series: {report['series']['families']}")
    print(f"\ndeploy/ limits: {report['limits']}")
    for world, entry in report["load"].items():
        print(f"\n{world} ranks")
        for name, figures in entry.items():
            shown = ", ".join(f"{k} {v:,.1f}" for k, v in figures.items())
            print(f"  {name}: {shown}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about a minute, for CI")
    parser.add_argument("--json", type=Path, default=Path(__file__).with_name("scale.json"))
    parser.add_argument("--reset-worker", nargs=3, metavar=("STORE", "OUT", "ROUNDS"))
    parser.add_argument("--export-worker", nargs=3, metavar=("ENDPOINT", "STEPS", "EVERY"))
    args = parser.parse_args(argv)
    if args.reset_worker:
        store, out, rounds = args.reset_worker
        reset_worker(store, out, int(rounds))
        return 0
    if args.export_worker:
        endpoint, steps, every = args.export_worker
        export_worker(endpoint, int(steps), int(every))
        return 0
    if args.quick:
        worlds, rounds, ranks, steps, every_steps = [2, 4], 5, 2, 200, 30
    else:
        worlds, rounds, ranks, steps, every_steps = [2, 4, 8, 16], 30, 8, 1000, 200
    limits = deploy_limits()
    export = {
        "default": measure_export(ranks, steps, 0),
        "trace_every=1": measure_export(ranks, every_steps, 1),
    }
    series = measure_series()
    report = {
        "reset": measure_reset(worlds, rounds),
        "export": export,
        "series": series,
        "limits": limits,
        "load": load(export, series, limits),
    }
    print_report(report)
    args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
