"""Size and render time of `looptrace report` on a multi-rank run, in headless Chromium.

Records RANKS ranks of STEPS steps on simulated clocks (every 10th step traced, slow laps
traced whatever the sampling, one rank loading data more slowly), writes the report and
loads it in the system's Chromium with every request but the page refused:

    python benchmarks/html_report.py --ranks 8 --steps 2000 --out /tmp/lt-report
    python benchmarks/html_report.py --ranks 4 --steps 400 --screenshot docs/report.png
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from looptrace import RankInfo, configure
from looptrace._cli import main
from looptrace.testing import FakeClock

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def record(directory: Path, rank: int, world: int, steps: int) -> None:
    """Record one rank's run into `directory` (spans and snapshots)."""
    clock = FakeClock(start_s=0.0)
    rng = random.Random(rank)
    lt = configure(
        "looptrace-bench",
        clock=clock,
        rank=RankInfo(rank=rank, world_size=world),
        trace_every=10,
        trace_file=directory / "spans.jsonl",
        snapshot_file=directory / "snapshots.jsonl",
    )
    train = lt.timer("training")
    forward = train.timer("forward")

    def spend(median: float, spread: float = 0.2) -> None:
        clock.advance(rng.lognormvariate(0.0, spread) * median)

    for step in range(1, steps + 1):
        train.record("data")
        spend(0.012 * (1.6 if rank == world // 2 else 1.0), 0.3)
        if rng.random() < 0.004:
            clock.advance(rng.uniform(0.5, 1.5))  # a stalled read: a slow lap
        train.record("forward")
        forward.record("encoder")
        spend(0.018)
        forward.record("decoder")
        spend(0.011)
        train.record("backward")
        spend(0.055, 0.1)
        with train.section("optimizer"):
            spend(0.006, 0.1)
        if step % 250 == 0:
            with train.section("eval"):
                spend(1.5, 0.05)
        if step % 1000 == 0:
            with train.section("checkpoint"):
                spend(4.0, 0.2)
        if step < steps:
            train.record()
        else:
            train.stop()
        if step % 100 == 0 or step == steps:
            lt.reset()
    lt.shutdown()


def render_seconds(page_file: Path, screenshot: Path | None) -> float:
    """Return the seconds Chromium takes to load the page (no request leaves it)."""
    from playwright.sync_api import sync_playwright

    url = page_file.resolve().as_uri()
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.route("**/*", lambda r: r.continue_() if r.request.url == url else r.abort())
        started = time.perf_counter()
        page.goto(url, wait_until="load")
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => r(null)))")
        seconds = time.perf_counter() - started
        if screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=True)
        browser.close()
    return seconds


def run() -> None:
    """Record, report, load; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/looptrace-html-report"))
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.jsonl"):
        old.unlink()
    for rank in range(args.ranks):
        record(args.out, rank, args.ranks, args.steps)
    page_file = args.out / "report.html"
    started = time.perf_counter()
    assert main(["report", str(args.out), "-o", str(page_file)]) == 0
    written = time.perf_counter() - started
    seconds = render_seconds(page_file, args.screenshot)
    print(
        f"{args.ranks} ranks x {args.steps} steps: {page_file.stat().st_size / 1e6:.2f} MB, "
        f"written in {written:.1f} s, loaded and drawn by Chromium in {seconds:.2f} s"
    )


if __name__ == "__main__":
    run()
