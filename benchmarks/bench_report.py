"""The report of benchmarks/bench.py: the issue's targets as measured, and the printed table."""

from __future__ import annotations

from typing import Any


def targets_of(rows: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, float]:
    """Return the issues' targets (P1-P7 and the others) as measured in this run."""
    by_name = {row["case"]: row for row in rows}

    def ratio(case: str, reference: str) -> float:
        return float(by_name[case]["median_ns"]) / float(by_name[reference]["median_ns"])

    targets = {
        "P1 record() aggregate-only x floor (<= 1.5)": ratio(
            "looptrace record(), aggregate only", "floor (30-line lap timer)"
        ),
        "P1 section() aggregate-only x floor (<= 1.5)": ratio(
            "looptrace section(), aggregate only", "floor (30-line lap timer)"
        ),
        "P2 traced+exported CPU x raw SDK, OTLP (<= 1.0)": by_name[
            "looptrace record(), traced, otlp"
        ]["cpu_x_raw_sdk"],
        # No target: a looptrace `with` block against a minimal pure-Python `with` timer.
        "section() aggregate-only x the floor's with blocks": ratio(
            "looptrace section(), aggregate only", "floor as with blocks (20-line class)"
        ),
        "P1 record() aggregate-only x codetiming (< 1)": ratio(
            "looptrace record(), aggregate only", "codetiming (Timer, reused)"
        ),
        "P1 record() aggregate-only x Megatron-style (< 1)": ratio(
            "looptrace record(), aggregate only", "Megatron-style timers"
        ),
        "P1 section() aggregate-only x Megatron-style (< 1)": ratio(
            "looptrace section(), aggregate only", "Megatron-style timers"
        ),
        "P1 count() x record() (<= 1)": extra["count"]["count_x_record"],
        "P6 reset() per section x floor section (<= 1.0)": extra["reset"][
            "aggregate only reset x floor section"
        ],
        "P6 reset() per section x floor section, app MeterProvider (<= 1.0)": extra["reset"][
            "app MeterProvider reset x floor section"
        ],
        # No target: the worst reset() with an output attached (reset_outputs.py), in ms.
        **{
            f"P6 worst reset() ms, {case}": times["worst_ms"]
            for case, times in extra["reset_outputs"].items()
        },
        # No target: reading every path's statistics of the window `reset()` returned.
        "reading reset()'s statistics, per section x floor section": extra["reset"][
            "aggregate only read x floor section"
        ],
        "P7 1000 paths x 10 paths per section (<= 1.5)": extra["paths"]["1000 x 10 paths"],
        "P7, fastest rounds": extra["paths"]["1000 x 10 paths, fastest rounds"],
        "P3 realistic step overhead % (<= 0.25)": extra["realistic_step"][
            "overhead_pct_of_10ms_step"
        ],
        "P4 RSS growth MB over 1e6 sections (<= 5)": extra["rss"]["rss_growth_mb"],
        "P4 worst sketch quantile error % (<= 1)": 100 * max(extra["sketch"].values()),
        "P5 stalled / no-exporter traced cost (<= 1.5)": ratio(
            "looptrace record(), traced, stalled", "looptrace record(), traced, discard"
        ),
        "M1 app MeterProvider x aggregate only, reset share included": extra["metrics_reset"][
            "app MeterProvider x floor"
        ]
        / extra["metrics_reset"]["aggregate only x floor"],
        "slow-lap recording on / off, aggregate only (<= 1.03)": extra["slow_laps"][
            "aggregate_only_on_x_off"
        ],
        "sections never lapped / lapped, default sampling (<= 1.5)": ratio(
            "looptrace sections-only(), default sampling, discard",
            "looptrace section(), default sampling, discard",
        ),
    }
    return targets


def print_report(
    rows: list[dict[str, Any]], extra: dict[str, Any], targets: dict[str, float]
) -> None:
    """Print the table, the extra measurements and the targets."""
    print(
        f"{'case':44} {'median':>9} {'min':>9} {'max':>9} {'cpu':>9} {'x floor':>8} "
        f"{'cpu x SDK':>9}"
    )
    for row in rows:
        sdk = f"{row['cpu_x_raw_sdk']:.2f}" if row["cpu_x_raw_sdk"] else ""
        print(
            f"{row['case']:44} {row['median_ns']:8.0f}n {row['min_ns']:8.0f}n "
            f"{row['max_ns']:8.0f}n {row['cpu_ns']:8.0f}n {row['x_floor']:8.2f} {sdk:>9}"
        )
    floor = rows[0]
    print(
        f"\nthe floor's median / fastest round: {floor['median_ns'] / floor['min_ns']:.2f} "
        "(about 1.1 on a quiet machine; well above, the machine changed speed during the run, "
        "cases' medians fell at different speeds and the ratios between them moved)"
    )
    step = extra["realistic_step"]
    print(
        "realistic 10 ms step (20 sections, default sampling): "
        f"{step['cpu_ns_per_step'] / 1000:.1f} µs/step of CPU added = "
        f"{step['overhead_pct_of_10ms_step']:.3f} %; empty steps on the real clock, stalls "
        f"exported as slow laps: {step['real_clock_cpu_ns_per_step'] / 1000:.1f} µs/step"
    )
    print(
        f"RSS growth over {extra['rss']['sections']:,} aggregated sections: "
        f"{extra['rss']['rss_growth_mb']:.2f} MB"
    )
    names = extra["names"]
    print(
        f"RSS growth over {names['names']:,} distinct section names: "
        f"{names['rss_growth_mb']:.1f} MB; reset() {names['reset_us_before']:.0f} µs before, "
        f"{names['reset_us_after']:.0f} µs after"
    )
    print(
        "sketch relative error: "
        + ", ".join(f"{k[:3]} {v * 100:.3f} %" for k, v in extra["sketch"].items())
    )
    print(
        f"OTLP/gRPC export to a local receiver: {extra['export']['spans_per_s']:,.0f} spans/s "
        f"({extra['export']['spans_delivered']:,} delivered)"
    )
    torch_loop = extra["instrument"]
    print(
        f"instrument() on a small PyTorch loop ({torch_loop['plain_ns_per_step'] / 1e3:.0f} µs a "
        f"step): +{torch_loop['instrumented_extra_ns_per_step'] / 1e3:.1f} µs a step "
        f"({torch_loop['instrumented_pct_of_10ms_step']:.2f} % of a 10 ms step), with model= and "
        f"optimizer= +{torch_loop['given_extra_ns_per_step'] / 1e3:.1f} µs, by hand "
        f"+{torch_loop['by_hand_extra_ns_per_step'] / 1e3:.1f} µs"
    )
    it = extra["iterate"]
    print(
        f"iterate(): {it['iterate_ns_per_item']:.0f} ns/item, by hand (record() + "
        f"record('data')): {it['by_hand_ns_per_item']:.0f} ns/item, bare loop "
        f"{it['bare_ns_per_item']:.0f} ns/item; iterate x by hand {it['iterate_x_by_hand']:.2f}"
    )
    counted = extra["count"]
    print(
        f"count('tokens', 512): {counted['count_ns_per_call']:.0f} ns/call, record() "
        f"{counted['record_ns_per_call']:.0f} ns/call, bare loop "
        f"{counted['bare_ns_per_call']:.0f} ns/call; count x record "
        f"{counted['count_x_record']:.2f}; with flops_per_unit= "
        f"{counted['count_flops_ns_per_call']:.0f} ns/call"
    )
    slow = extra["slow_laps"]
    print(
        "slow-lap recording, record() per section: aggregate only, on / off "
        f"{slow['aggregate_only_on_ns']:.0f} / {slow['aggregate_only_off_ns']:.0f} ns = "
        f"{slow['aggregate_only_on_x_off']:.3f}; untraced steps with an exporter, recorded "
        f"/ off {slow['recorded_ns']:.0f} / {slow['recorded_off_ns']:.0f} ns = "
        f"{slow['recorded_x_off']:.3f}, with the capped exports of this empty loop "
        f"{slow['recorded_exported_ns']:.0f} ns = {slow['recorded_exported_x_off']:.3f}"
    )
    reset = extra["metrics_reset"]
    print(
        "per section with its share of reset(), x floor: "
        + ", ".join(
            f"{k[: -len(' x floor')]} {v:.2f}" for k, v in reset.items() if k.endswith("x floor")
        )
    )
    paths = extra["paths"]
    print(
        "per section with its share of reset(), 10 / 1000 distinct paths: "
        f"{paths['10 paths ns/section']:.0f} / {paths['1000 paths ns/section']:.0f} ns, "
        f"of which reset() {paths['10 paths reset() ns/section']:.0f} / "
        f"{paths['1000 paths reset() ns/section']:.0f} ns"
    )
    print("reset() alone with one output attached, nobody reading, median / worst:")
    for case, times in extra["reset_outputs"].items():
        print(f"  {case:48} {times['median_ms']:8.2f} / {times['worst_ms']:8.2f} ms")
    print("\ntargets:")
    for name, value in targets.items():
        print(f"  {name}: {value:.3f}")
