"""The cyclic garbage collector paused while a reader builds its records.

Reading a job's files makes millions of small objects (records, dicts, tuples) and no
reference cycle, and the collector, triggered by the allocations, scans the growing heap
again and again: at 0.8 M spans it took half the reading time. Paused for the read and
resumed after, it collects what is left as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic collector inside the block (if it ran), resume it after."""
    running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if running:
            gc.enable()
