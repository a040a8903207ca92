"""Child processes (fork, forkserver, spawn; pools; DataLoader workers) flush at normal exit.

A `multiprocessing` child started by fork or forkserver ends with `os._exit`, so `atexit`
never runs there: each test counts every lap of every child in the child's files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers.processes import bare_env

CHILDREN = """
import json, multiprocessing, os, sys
from concurrent.futures import ProcessPoolExecutor

import looptrace

def configure(out):
    global lt
    pid = os.getpid()
    lt = looptrace.configure(
        trace_file=f"{out}/spans.{pid}.jsonl",
        snapshot_file=f"{out}/snaps.{pid}.jsonl",
        trace_every=1,
    )

def laps(n):
    train = lt.timer("train")
    for _ in range(n):
        train.record("data")
        train.stop()
    return os.getpid()

def child(out):
    configure(out)
    laps(10)

def main(kind, method, out):
    context = multiprocessing.get_context(method)
    if kind == "process":
        process = context.Process(target=child, args=(out,))
        process.start()
        process.join()
        print(json.dumps({str(process.pid): 10}))
    elif kind == "pool":
        with ProcessPoolExecutor(2, mp_context=context, initializer=configure,
                                 initargs=(out,)) as pool:
            pids = list(pool.map(laps, [3] * 8))
        print(json.dumps({str(pid): 3 * pids.count(pid) for pid in set(pids)}))

if __name__ == "__main__":
    main(*sys.argv[1:])
"""

# The parent's looptrace, inherited by forked DataLoader workers that time each load; the
# parent forks them inside a lap of `setup`, which the workers never return to.
LOADER = """
import json, sys
import torch
from torch.utils.data import DataLoader, Dataset
import looptrace

out = sys.argv[2]
lt = looptrace.configure(
    trace_file=f"{out}/spans.jsonl", snapshot_file=f"{out}/snaps.jsonl", trace_every=1
)
load = lt.timer("load")

class Items(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, index):
        with load.section("read"):
            return torch.tensor(index)

if __name__ == "__main__":
    setup, train = lt.timer("setup"), lt.timer("train")
    setup.record()
    loader = DataLoader(Items(), batch_size=4, num_workers=2, multiprocessing_context=sys.argv[1])
    batches = iter(loader)
    setup.stop()
    for batch in train.iterate(batches):
        pass
"""


def _run(script: str, tmp_path: Path, *args: str) -> str:
    """Run `script` from a file (spawn and forkserver children import it) and return its output."""
    path = tmp_path / "program.py"
    path.write_text(script)
    out = tmp_path / "out"
    out.mkdir()
    process = subprocess.run(
        [sys.executable, str(path), *args, str(out)],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
        env=bare_env(),
        cwd=tmp_path,
    )
    assert process.returncode == 0, process.stderr
    return process.stdout


def _span_names(path: Path) -> list[str]:
    """Return the names of the spans in a span file."""
    return [
        span["name"]
        for line in path.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def _counts(path: Path) -> dict[str, int]:
    """Return each path's count summed over the windows of a snapshot file."""
    total: dict[str, int] = {}
    for line in path.read_text().splitlines():
        for name, stats in json.loads(line)["stats"].items():
            total[name] = total.get(name, 0) + stats["count"]
    return total


def _files(tmp_path: Path, laps: dict[str, int]) -> dict[str, tuple[int, int, dict[str, int]]]:
    """Return per child pid: its train spans, data spans and snapshot counts."""
    out = tmp_path / "out"
    found = {}
    for pid in laps:
        names = _span_names(out / f"spans.{pid}.jsonl")
        found[pid] = (
            names.count("train"),
            names.count("data"),
            _counts(out / f"snaps.{pid}.jsonl"),
        )
    return found


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_a_process_that_configures_looptrace_flushes_at_exit(tmp_path: Path, method: str) -> None:
    """A `multiprocessing.Process` child writes all its laps, whatever its start method."""
    laps = json.loads(_run(CHILDREN, tmp_path, "process", method))
    assert _files(tmp_path, laps) == {
        pid: (n, n, {"root.train": n, "root.train.data": n}) for pid, n in laps.items()
    }


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_pool_workers_configured_by_an_initializer_flush_at_exit(
    tmp_path: Path, method: str
) -> None:
    """Each worker of a `ProcessPoolExecutor` writes the laps of every task it ran."""
    laps = json.loads(_run(CHILDREN, tmp_path, "pool", method))
    assert sum(laps.values()) == 24
    assert _files(tmp_path, laps) == {
        pid: (n, n, {"root.train": n, "root.train.data": n}) for pid, n in laps.items()
    }


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_dataloader_workers_write_every_load(tmp_path: Path, method: str) -> None:
    """Workers of a DataLoader write every load; forked ones add nothing of the parent's laps."""
    pytest.importorskip("torch")
    _run(LOADER, tmp_path, method)
    out = tmp_path / "out"
    names = _span_names(out / "spans.jsonl")
    assert (names.count("read"), names.count("setup")) == (64, 1)
    counts = _counts(out / "snaps.jsonl")
    assert {p: counts[p] for p in ("root.load.read", "root.setup", "root.train")} == {
        "root.load.read": 64,
        "root.setup": 1,
        "root.train": 16,
    }
