"""How large `looptrace report`'s page of a generated job is, how long it takes, how fast it loads.

Generates a job (`offline_job.py`: every rank's span and snapshot files, 20 sections), runs
`looptrace report` of it in a process of its own (wall time, peak memory, page size) for the
source tree given (this one by default; `--src` another, e.g. an earlier commit's `src/`), then
loads the page in headless Chromium (Debian's, through Playwright) and times it to the load
event and the next frame, the best of 3.

    python benchmarks/report_page.py --ranks 1024 --seconds 3600
    python benchmarks/report_page.py --ranks 256 --src /tmp/base/src --job /tmp/job256
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from offline_job import write_job

CHROMIUM = "/usr/bin/chromium"
_COMMAND = """
import json, sys, time
from looptrace._cli import main
from looptrace._core.build import core_kind
start = time.perf_counter()
sys.stdout = open("/dev/null", "w")
code = main(sys.argv[1:])
sys.stdout = sys.__stdout__
peak = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print(json.dumps({"code": code, "s": time.perf_counter() - start, "core": core_kind(),
                  "max_rss_mb": int(peak[0].split()[1]) / 1024 if peak else None}))
"""


def report(job: Path, page: Path, src: Path) -> dict[str, Any]:
    """Run `looptrace report` of `job` with the package under `src`; return its figures."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", _COMMAND, "report", str(job), "-o", str(page)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    found["page_mb"] = round(page.stat().st_size / 1e6, 2)
    return found


def load_time(page: Path, rounds: int = 3) -> dict[str, float]:
    """Return the seconds Chromium takes to load the page and paint the next frame (best)."""
    from playwright.sync_api import sync_playwright

    best: dict[str, float] = {}
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        for _ in range(rounds):
            tab = browser.new_page(viewport={"width": 1100, "height": 900})
            start = time.perf_counter()
            tab.goto(page.as_uri(), wait_until="load")
            loaded = time.perf_counter() - start
            tab.evaluate("() => new Promise(r => requestAnimationFrame(() => r(0)))")
            painted = time.perf_counter() - start
            tab.close()
            if not best or painted < best["painted_s"]:
                best = {"load_s": round(loaded, 3), "painted_s": round(painted, 3)}
        browser.close()
    return best


def main() -> None:
    """Generate the job (unless given), report it, load the page; print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--job", type=Path, help="a job's folder (generated when missing)")
    parser.add_argument("--src", type=Path, default=Path(__file__).parents[1] / "src")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        job = args.job or Path(scratch) / "job"
        counts: dict[str, Any] = {}
        if not job.exists():
            start = time.perf_counter()
            counts = write_job(job, args.ranks, args.seconds)
            counts["generated_s"] = round(time.perf_counter() - start, 1)
        page = Path(scratch) / "report.html"
        found = {"job": counts or str(job), "report": report(job, page, args.src)}
        found["chromium"] = load_time(page)
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
