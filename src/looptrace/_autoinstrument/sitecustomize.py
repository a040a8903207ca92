"""Instruments a PyTorch program at interpreter start under `looptrace run`.

Runs in every Python process started with this directory on `PYTHONPATH`; it instruments
only when `LOOPTRACE_RUN_DIR` is set, and never in the `torchrun` launcher or a
multiprocessing child (DataLoader workers). Then it loads the next `sitecustomize` on the
path, if any, as the interpreter would have.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import os
import sys


def _launcher_or_child() -> bool:
    argv = [*getattr(sys, "orig_argv", ()), *sys.argv]
    return (
        os.path.basename(sys.argv[0] if sys.argv else "") == "torchrun"
        or "torch.distributed.run" in argv
        or "torch.distributed.launch" in argv
        or "--multiprocessing-fork" in argv
        or any("multiprocessing" in arg and "spawn_main" in arg for arg in argv)
        or any("multiprocessing.forkserver" in arg for arg in argv)
    )


def _instrument() -> None:
    if not os.environ.get("LOOPTRACE_RUN_DIR") or _launcher_or_child():
        return
    try:
        from looptrace.integrations.auto import instrument_from_environment  # noqa: PLC0415

        instrument_from_environment()
    except Exception:  # the program runs on, untimed
        logging.getLogger("looptrace").exception("looptrace run: instrumenting failed")


def _next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_instrument()
_next_sitecustomize()
