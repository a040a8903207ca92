"""The setting of benchmarks/scale.py: the loop every measurement runs, and deploy/'s files."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCALE = Path(__file__).with_name("scale.py")

PATHS = 100  # section paths of the reset measurement: the 1,024 x 100 example of the design
SECTIONS = 20  # sections per step of the export and Prometheus measurements
STEP_S = 1.0
RESET_EVERY = 100  # steps per window, as in the README's loop
# A real pause per step: with the fake clock alone a rank would make its spans faster than a
# batch span processor drains its queue, and drop them, which no rank at 1 step/s does.
PACE_S = 0.004
DEFAULT_EVERY = 100  # the default sampling past the first 10 steps
EXTRAPOLATE = (1024, 16384)
WORKER = (sys.executable, str(SCALE))  # scale.py runs each rank process
GATEWAY = ROOT / "deploy" / "collector" / "gateway.yaml"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
