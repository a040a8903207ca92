"""`looptrace perfetto`: spans as a Chrome / Perfetto trace (JSON), viewable with no server.

Each span is a complete (`"X"`) event; `pid` is the rank (named "rank N @ host"), `tid` a thread
of that rank (named after `thread.name`, which looptrace puts on outermost laps; sections take
their lap's). Timestamps are microseconds since the earliest span of
all inputs, so several rank files merge into one timeline; the epoch of that origin is kept in
`otherData`. Events on one tid always nest: a span that would overlap a sibling on its thread
without nesting (two independent timers interleaved) goes to an extra track of that thread.

An event's args hold its path, step, rank, ids and, on an error, `status` and `error` (the
exception), then every other attribute of the span under its own name (`looptrace.slow_lap`,
the slow lap's time over the median; the rank attributes; an integration's attributes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from looptrace._base.attributes import PATH, STEP, THREAD_ID, THREAD_NAME
from looptrace._base.version import version
from looptrace._distributed.ranks import RANK
from looptrace._offline.span_records import SpanRecord

_NO_THREAD = "spans without thread.id"
_SHOWN = frozenset({PATH, STEP, RANK, THREAD_ID, THREAD_NAME})  # the event shows them already


def chrome_trace(spans: Sequence[SpanRecord]) -> dict[str, Any]:
    """Return the Chrome trace-event JSON object of `spans` (any number of ranks)."""
    origin = min((s.start_ns for s in spans), default=0)
    depth = _depths(spans)
    ordered = sorted(spans, key=lambda s: (s.rank, s.start_ns, -s.end_ns, depth[s.span_id]))
    events: list[dict[str, Any]] = []
    hosts: dict[int, str | None] = {}
    tracks: dict[tuple[int, int | None], list[list[int]]] = defaultdict(list)
    tids: dict[tuple[int, int | None, int], int] = {}
    names: dict[tuple[int, int], str] = {}
    threads = _threads(spans)
    for span in ordered:
        hosts.setdefault(span.rank, span.host)
        thread_id, thread_name = threads[span.span_id]
        lanes = tracks[(span.rank, thread_id)]
        lane = _place(lanes, span.start_ns, span.end_ns)
        key = (span.rank, thread_id, lane)
        if key not in tids:
            tid = tids[key] = sum(1 for k in tids if k[0] == span.rank) + 1
            base = thread_name or (_NO_THREAD if thread_id is None else f"thread {thread_id}")
            names[(span.rank, tid)] = base if lane == 0 else f"{base} (overlapping {lane + 1})"
        events.append(_event(span, origin, tids[key]))
    meta: list[dict[str, Any]] = []
    for rank, host in sorted(hosts.items()):
        label = f"rank {rank} @ {host}" if host else f"rank {rank}"
        meta.append(_meta("process_name", rank, 0, {"name": label}))
        meta.append(_meta("process_sort_index", rank, 0, {"sort_index": rank}))
    for (rank, tid), name in sorted(names.items()):
        meta.append(_meta("thread_name", rank, tid, {"name": name}))
        meta.append(_meta("thread_sort_index", rank, tid, {"sort_index": tid}))
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "otherData": {"generator": f"looptrace {version()}", "origin_epoch_ns": origin},
    }


def _place(lanes: list[list[int]], start: int, end: int) -> int:
    """Return the first lane where [start, end] nests, pushing it there (lanes: open ends)."""
    for index, open_ends in enumerate(lanes):
        while open_ends and open_ends[-1] <= start:
            open_ends.pop()
        if not open_ends or end <= open_ends[-1]:
            open_ends.append(end)
            return index
    lanes.append([end])
    return len(lanes) - 1


def _threads(spans: Sequence[SpanRecord]) -> dict[str, tuple[int | None, str | None]]:
    """Return each span's thread: its own `thread.id`, else that of its nearest ancestor.

    looptrace puts the thread on outermost lap spans only; their sections run in the same
    thread. The search stays within the span's rank (other ranks' laps may be its parent).
    """
    by_id = {s.span_id: s for s in spans}
    found: dict[str, tuple[int | None, str | None]] = {}
    for span in spans:
        chain = []
        current: SpanRecord | None = span
        while current is not None and current.span_id not in found:
            if current.thread_id is not None:
                found[current.span_id] = (current.thread_id, current.thread_name)
                break
            chain.append(current.span_id)
            parent = by_id.get(current.parent_id)
            current = parent if parent is not None and parent.rank == span.rank else None
            if current is not None and current.span_id in chain:
                current = None  # a cycle in corrupt input
        thread = found[current.span_id] if current is not None else (None, None)
        for member in chain:
            found[member] = thread
    return found


def _depths(spans: Sequence[SpanRecord]) -> dict[str, int]:
    """Return each span's depth below its outermost ancestor present in `spans`."""
    parents = {s.span_id: s.parent_id for s in spans}
    depths: dict[str, int] = {}
    for span_id in parents:
        chain = []
        current = span_id
        while current in parents and current not in depths and current not in chain:
            chain.append(current)
            current = parents[current]
        base = depths.get(current, -1)
        for offset, member in enumerate(reversed(chain), 1):
            depths[member] = base + offset
    return depths


def _event(span: SpanRecord, origin: int, tid: int) -> dict[str, Any]:
    args: dict[str, Any] = {"path": span.path}
    if span.step is not None:
        args["step"] = span.step
    args.update(rank=span.rank, trace_id=span.trace_id, span_id=span.span_id)
    if span.parent_id:
        args["parent_span_id"] = span.parent_id
    if span.error:
        args["status"] = "ERROR"
        if span.status_message:
            args["error"] = span.status_message
    for key, value in span.attributes.items():
        if key not in _SHOWN and key not in args and value is not None:
            args[key] = value
    return {
        "name": span.name,
        "cat": "looptrace",
        "ph": "X",
        "ts": (span.start_ns - origin) / 1000,
        "dur": span.duration_ns / 1000,
        "pid": span.rank,
        "tid": tid,
        "args": args,
    }


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}
