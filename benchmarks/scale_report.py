"""The report of benchmarks/scale.py: its figures as plain tables."""

from __future__ import annotations

from typing import Any

from scale_common import PATHS


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
