"""Runs recorded by another Python process: a second writer of the same rank's files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_RECORD = (
    "import sys; from pathlib import Path; from tests.helpers.runs import record_run; "
    "record_run(Path(sys.argv[1]))"
)
_JOB_IDS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "LOOPTRACE_RUN_ID", "RANK", "WORLD_SIZE")


def record_in_another_process(directory: Path) -> None:
    """Record `tests.runs.record_run(directory)` (rank 0) in a Python process of its own."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in _JOB_IDS}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root), env.get("PYTHONPATH", "")])
    subprocess.run(
        [sys.executable, "-c", _RECORD, str(directory)], env=env, check=True, timeout=120
    )
