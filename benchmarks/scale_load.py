"""Scale, part 3: one rank's Prometheus series, deploy/'s limits, and the load of a large job."""

from __future__ import annotations

import math
import urllib.request
from typing import Any

import yaml
from scale_common import EXTRAPOLATE, GATEWAY, PROMETHEUS, SECTIONS, STEP_S


def measure_series() -> dict[str, Any]:
    """Serve one rank's endpoint for SECTIONS sections, scrape it, count series per family."""
    from tests.helpers.otlp_server import free_port

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
