"""Scale: what a job's ranks move between themselves and send to the backend, as the job grows.

Three measurements, each on real parts of this machine, then extrapolated to 1,024 and 16,384
ranks:

1. `reset(across_ranks=True)`: time and bytes per rank for worlds of 2 to 16 gloo processes,
   the all_reduce design next to the all_gather design it replaced (kept in
   `scale_gathered.py`, for comparison only). Bytes are counted at the collective calls: for an
   all_reduce the tensor a rank passes in and gets back, for an all_gather what it receives.
2. OTLP load: N rank processes (`RANK`/`WORLD_SIZE` set, a fake clock at 1 step per second, 20
   sections per step) export to a real OTLP/HTTP receiver (tests/helpers/otlp_server.py) at the
   default sampling and at `trace_every=1`; spans and protobuf bytes per second per rank, the
   burst of one traced step over the job, against deploy/'s collector gateway settings.
3. Prometheus: the series one rank's endpoint serves for 20 sections (scraped for real), per
   rank and per job, against the limits of deploy/'s Prometheus config.
4. Prometheus at scale: the series every rank of a 2- to 16-rank gloo job serves after
   `reset(across_ranks=True)` (scraped for real), at the defaults and with every rank's
   full detail, extrapolated to 1,024 and 16,384 ranks (`scale_series.py`).

    python benchmarks/scale.py            # full run: worlds 2, 4, 8, 16; 8 exporting ranks
    python benchmarks/scale.py --quick    # CI: worlds 2, 4; 2 exporting ranks; about a minute
    python benchmarks/scale.py --series   # part 4 alone, worlds 2, 4, 8, 16

Times on a small shared machine with more processes than cores grow with the world size for
reasons a cluster does not have (the processes share the cores); the fits below say how the
measured times grow here, while the byte counts are exact and independent of the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scale_common import ROOT
from scale_export import export_worker, measure_export
from scale_load import deploy_limits, load, measure_series
from scale_report import print_report
from scale_reset import measure_reset, reset_worker
from scale_series import measure_job_series, print_job_series, series_worker

sys.path.insert(0, str(ROOT))  # tests/helpers/otlp_server.py, when run as `python benchmarks/scale.py`


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about a minute, for CI")
    parser.add_argument("--json", type=Path, default=Path(__file__).with_name("scale.json"))
    parser.add_argument("--reset-worker", nargs=3, metavar=("STORE", "OUT", "ROUNDS"))
    parser.add_argument("--export-worker", nargs=3, metavar=("ENDPOINT", "STEPS", "EVERY"))
    parser.add_argument("--series-worker", nargs=3, metavar=("STORE", "OUT", "DETAIL"))
    parser.add_argument("--series", action="store_true", help="part 4 alone: series of a job")
    args = parser.parse_args(argv)
    if args.series_worker:
        series_worker(*args.series_worker)
        return 0
    if args.reset_worker:
        store, out, rounds = args.reset_worker
        reset_worker(store, out, int(rounds))
        return 0
    if args.export_worker:
        endpoint, steps, every = args.export_worker
        export_worker(endpoint, int(steps), int(every))
        return 0
    if args.series:
        job_series = measure_job_series([2, 4, 8, 16])
        print_job_series(job_series)
        args.json.with_name("scale_series.json").write_text(json.dumps(job_series, indent=2))
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
    job_series = measure_job_series(worlds)
    report = {
        "reset": measure_reset(worlds, rounds),
        "export": export,
        "series": series,
        "limits": limits,
        "load": load(export, series, limits),
        "job_series": job_series,
    }
    print_report(report)
    print_job_series(job_series)
    args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
