"""The job's histograms and the detail ranks, through real torch.distributed (gloo) and scrapes."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch.distributed", reason="needs torch (the test extra)")
from tests.helpers import scale_worker
from tests.helpers.processes import run_ranks

WORKER = Path(scale_worker.__file__)
JOB_TIMEOUT_S = 180
HISTOGRAM = "looptrace_section_duration_seconds"
JOB_HISTOGRAM = "looptrace_job_section_duration_seconds"
RANK_SERIES = {
    "looptrace_rank_steps_total",
    "looptrace_rank_step_window_duration_seconds",
    "looptrace_rank_outside_wait_seconds_total",
}

Sample = tuple[str, dict[str, str], float]


def run_job(world: int, workdir: Path, scenario: str, detail: str, job_rank: int) -> list[Any]:
    """Run `world` rank processes of `scale_worker` and return each one's windows, rank order."""
    args = [scenario, detail, str(job_rank)]
    return run_ranks(WORKER, world, workdir, args, timeout_s=JOB_TIMEOUT_S, one_host_each=True)


def histogram(samples: list[Sample], family: str) -> dict[tuple[str, str, str], float]:
    """Return `{(sample suffix, path, le): value}` of one histogram family of a scrape."""
    found = {}
    for name, labels, value in samples:
        suffix = name.removeprefix(family)
        if name.startswith(family) and suffix in ("_bucket", "_count", "_sum"):
            found[suffix, labels["looptrace_path"], labels.get("le", "")] = value
    return found


@pytest.mark.parametrize(
    ("world", "job_rank"),
    [(2, 1), (4, 0), pytest.param(8, 0, marks=pytest.mark.slow)],
    ids=["2-ranks", "4-ranks", "8-ranks"],
)
def test_job_histogram_is_the_sum_of_the_ranks_own(
    world: int, job_rank: int, tmp_path: Path
) -> None:
    """After every window, the job rank's histogram is the sum of every rank's served one."""
    results = run_job(world, tmp_path, "sum", "all", job_rank)
    for window in range(scale_worker.WINDOWS["sum"]):
        scrapes = [r[window]["samples"] for r in results]
        summed: dict[tuple[str, str, str], float] = defaultdict(float)
        for samples in scrapes:
            for key, value in histogram(samples, HISTOGRAM).items():
                summed[key] += value
        job = histogram(scrapes[job_rank], JOB_HISTOGRAM)
        exact = {k: v for k, v in summed.items() if k[0] != "_sum"}
        assert {k: v for k, v in job.items() if k[0] != "_sum"} == exact
        assert {k: v for k, v in job.items() if k[0] == "_sum"} == pytest.approx(
            {k: v for k, v in summed.items() if k[0] == "_sum"}, rel=1e-12
        )
        assert {"root.train.forward", "root.eval.batch"} <= {path for _, path, _ in job}
        job_labels = [s[1] for s in scrapes[job_rank] if s[0].startswith(JOB_HISTOGRAM)]
        assert job_labels
        assert all("looptrace_rank" not in labels for labels in job_labels)
        others = [s for r, samples in enumerate(scrapes) if r != job_rank for s in samples]
        assert not [s for s in others if s[0].startswith("looptrace_job_")]
        assert [r[window]["serves_job"] for r in results] == [r == job_rank for r in range(world)]


def test_detail_follows_the_slowest_ranks(tmp_path: Path) -> None:
    """With detail_ranks=2, the two slowest ranks of each window serve detail, as it moves."""
    world = 4
    results = run_job(world, tmp_path, "moving", "2", 0)
    for window in range(scale_worker.WINDOWS["moving"]):
        slowest = {window % world, (window + 1) % world}
        flags = [r[window]["detail"] for r in results]
        assert flags == [rank in slowest for rank in range(world)], window
        for rank, r in enumerate(results):
            names = {name for name, _, _ in r[window]["samples"]}
            served = {name for name in names if not name.startswith("looptrace_job_")}
            if rank in slowest:
                assert f"{HISTOGRAM}_bucket" in served
                assert served >= RANK_SERIES
            else:
                assert served == RANK_SERIES, (window, rank)
                # the steps, their p50 and p99, the time outside wait sections: 4 series
                assert len([s for s in r[window]["samples"] if s[0] in served]) == 4
        assert f"{JOB_HISTOGRAM}_bucket" in {name for name, _, _ in results[0][window]["samples"]}
