"""The snapshot file: each `reset()` window as one JSON line, written off the training thread."""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import socket
import time
import weakref
from pathlib import Path
from typing import Any

from looptrace._distributed.ranks import RankInfo
from looptrace._export.coalesced import Coalesced
from looptrace._export.line_file import FLUSH_TIMEOUT_S, LineFile, loss_line
from looptrace._export.records import SNAPSHOT_KIND, SNAPSHOT_VERSION
from looptrace._export.window_queue import WindowQueue
from looptrace._stats.health import Incidents
from looptrace._stats.rate_metrics import rates_dict
from looptrace._stats.snapshot import Snapshot

YIELD_EVERY = 20  # paths encoded between two releases of the GIL


class SnapshotFileWriter:
    """An `Outputs.on_reset` sink writing each window's snapshot as one JSON line.

    A line holds `kind`, `version`, `step` (the outermost laps completed when the window
    closed, so its spans have `looptrace.step` below it), `steps` (`[first, last]`: the steps
    it holds time of, the first and the last possibly in part; absent when no lap ran in it),
    `time` (its end, epoch seconds),
    `start_ns`, `end_ns`, `rank`, `world_size`, `host`, `writer` (16 hex digits drawn once per
    process: two processes claiming one rank differ in it), `window` (the line's index among
    this writer's windows, from 0: a window read twice is told by its writer and index) and
    `stats` (path -> the `SectionStats`
    fields; undefined values as null), for `reset(across_ranks=True)` windows
    `across_ranks` (path -> the `SectionSpread` as a dict), and for a `timer.reset()` window
    `subtree` (that timer's path; its `step` counts that subtree's laps), `straggler` (the
    cross-rank window's `Straggler` as a dict) when there is one; `findings` holds
    the window's `Snapshot.diagnosis()` less its abstentions, when it found anything; where
    units were counted `rates` (path -> unit -> `total`, `per_s`, `per_lap_s`, `per_lap`,
    and `mfu` where known; undefined as null), and for the windows of every timer `memory`
    (`WindowMemory` as a dict, bytes), with a system sampler `system` (figure -> mean, max,
    samples: `WindowSystem`) and, reduced across ranks, `memory_across_ranks`
    (figure -> its `RankSpread` as a dict: min, max, mean, slowest_rank holding the most;
    figures no rank measured left out), and where some rank counted units
    `rates_across_ranks` (path -> unit -> its `RateSpread` as a dict: the job's `total` and
    `per_s`, the ranks' `min`, `max`, `mean` rate, `slowest_rank` with the least,
    `fastest_rank`, and how many `ranks` counted it). A window in which nothing was measured
    writes no line.

    `reset()` only queues its window; a thread of its own encodes and writes the lines, in
    order. Windows dropped because it fell `MAX_QUEUED_WINDOWS` behind, or that could not be
    written, are recorded by a loss line (`{"kind": "looptrace.lost", "windows": N}`).
    """

    def __init__(self, path: Path, rank: RankInfo, incidents: Incidents | None = None) -> None:
        self._file = LineFile(path, "snapshot_file")
        self._incidents = incidents or Incidents()
        self._unrecorded = 0  # windows lost and not yet recorded in the file (writer thread)
        self._rank = rank
        self._host = socket.gethostname()
        self._writer = secrets.token_hex(8)
        self._index = 0  # of the next window written (writer thread)
        self.path = path
        self._queue = WindowQueue(self._incidents, f"snapshot file {path}")
        self._writes = Coalesced(self._write_queued, "looptrace-snapshot-file")
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def renew() -> None:  # the parent's windows are the parent's to write
                writer = ref()
                if writer is not None:
                    writer._writer, writer._index = secrets.token_hex(8), 0
                    writer._queue.after_fork_in_child()
                    writer._writes.after_fork_in_child(closed=writer._writes.closed)

            os.register_at_fork(after_in_child=renew)

    def __call__(self, snapshot: Snapshot) -> None:
        """Queue `snapshot` for its line (none for an empty window); constant work."""
        self._queue.put(snapshot)
        self._writes.request()

    def write_record(self, record: dict[str, Any]) -> None:
        """Append one line that is not a window (the hang watchdog's), from any thread, now."""
        try:
            self._file.write(json.dumps(_json_safe(record), separators=(",", ":")).encode() + b"\n")
        except (OSError, ValueError, TypeError):
            self._incidents.failed(f"snapshot file {self.path}")

    def flush(self, timeout_s: float) -> bool:
        """Write every window queued so far; return whether that finished within `timeout_s`."""
        return self._writes.wait(self._writes.request(), timeout_s)

    def close(self) -> None:
        """Write the queued windows (within `FLUSH_TIMEOUT_S`), record losses, close the file.

        A writer stalled in the filesystem keeps the file: its windows are counted as dropped.
        """
        finished = self.flush(FLUSH_TIMEOUT_S)
        self._writes.close()
        if not finished:
            windows, _ = self._queue.take()
            for _window in windows:
                self._incidents.windows_dropped(
                    f"snapshot file {self.path}", f"cannot write to {self.path} in time"
                )
            return
        with contextlib.suppress(OSError):
            self._file.write(loss_line("windows", self._unrecorded))
            self._unrecorded = 0
        self._file.close()

    def remove(self) -> None:
        """Close the file and delete it if it was created for this writer."""
        self._writes.close()
        self._file.remove()

    def _write_queued(self, _ticket: int) -> None:
        windows, dropped = self._queue.take()
        for snapshot in windows:
            try:
                self._write(snapshot)
            except Exception:
                self._incidents.failed(f"snapshot file {self.path}")
                self._unrecorded += 1
        self._unrecorded += dropped  # dropped after the windows taken: recorded after them

    def _write(self, snapshot: Snapshot) -> None:
        if not snapshot:
            return
        self._index += 1
        record = {
            "kind": SNAPSHOT_KIND,
            "version": SNAPSHOT_VERSION,
            "step": snapshot.step,
            "time": snapshot.end_ns / 1e9,
            "start_ns": snapshot.start_ns,
            "end_ns": snapshot.end_ns,
            "rank": self._rank.rank,
            "world_size": self._rank.world_size,
            "host": self._host,
            "writer": self._writer,
            "window": self._index - 1,
        }
        if snapshot.steps:  # the first and last step it holds time of
            record["steps"] = [snapshot.steps.start, snapshot.steps.stop - 1]
        if snapshot.subtree != "root":  # timer.reset(): the window of that timer's subtree
            record["subtree"] = snapshot.subtree
        if snapshot.rates:  # units counted: {path: {unit: {total, per_s, per_lap_s, per_lap}}}
            record["rates"] = _json_safe(rates_dict(snapshot.rates))
        record.update(_marks(snapshot))
        if snapshot.memory is not None:  # the process's memory at the close (bytes)
            record["memory"] = snapshot.memory.to_dict()
        if snapshot.system is not None:  # sampled figures: {figure: {mean, max, samples}}
            record["system"] = _json_safe(snapshot.system.to_dict())
        if snapshot.across_ranks is not None:  # reset(across_ranks=True): the job's spread
            record["across_ranks"] = {
                path: _json_safe(spread.to_dict()) for path, spread in snapshot.across_ranks.items()
            }
        if snapshot.memory_across_ranks:  # reset(across_ranks=True): the job's memory (bytes)
            record["memory_across_ranks"] = {
                figure: _json_safe(spread.to_dict())
                for figure, spread in snapshot.memory_across_ranks.items()
            }
        if snapshot.rates_across_ranks:  # reset(across_ranks=True): the job's throughput
            record["rates_across_ranks"] = _json_safe(rates_dict(snapshot.rates_across_ranks))
        if snapshot.straggler is not None:  # the rank the others waited for
            record["straggler"] = _json_safe(snapshot.straggler.to_dict())
        findings = _findings(snapshot)
        if findings:  # what the diagnosis found, less abstentions
            record["findings"] = findings
        head = json.dumps(record, separators=(",", ":"))
        line = (head[:-1] + ',"stats":' + _stats_json(snapshot) + "}\n").encode()
        try:
            self._file.write(loss_line("windows", self._unrecorded) + line)
        except OSError as error:
            self._unrecorded += 1
            self._incidents.write_failed(
                f"snapshot file {self.path}",
                f"cannot write a window to {self.path}: {error.strerror}; lost windows are "
                "counted in lt.health().internal_errors and recorded in the file when it can "
                "be written again",
            )
            return
        self._unrecorded = 0


def _stats_json(snapshot: Snapshot) -> str:
    """Return the window's `stats` object as JSON, encoded a few paths at a time.

    One `json.dumps` of 1,000 paths holds the GIL for milliseconds in one C call, stalling
    the training thread's steps; between pieces of `YIELD_EVERY` paths this thread lets a
    waiting thread take the GIL at once.
    """
    parts = []
    for number, (path, stats) in enumerate(snapshot.items(), 1):
        parts.append(
            json.dumps(path) + ":" + json.dumps(_finite(stats.to_dict()), separators=(",", ":"))
        )
        if number % YIELD_EVERY == 0:
            time.sleep(0)  # release the GIL: a step waiting for it runs now
    return "{" + ",".join(parts) + "}"


def _marks(snapshot: Snapshot) -> dict[str, Any]:
    """Return what a window line says of the window itself, where it says anything."""
    marks: dict[str, Any] = {}
    if snapshot.partial:  # no whole lap: kept out of shares, per-lap rates, comparisons
        marks["partial"] = True
    if snapshot.overhead > 0:  # looptrace's own reset() time in the window (seconds)
        marks["overhead"] = snapshot.overhead
    return marks


def _findings(snapshot: Snapshot) -> list[Any]:
    """Return the window's findings as plain data, less abstentions; none if it cannot."""
    try:
        found = snapshot.diagnosis(min_severity="info")
    except Exception:  # a window's line matters more than its diagnosis
        return []
    return [_json_safe(f.to_dict()) for f in found if not f.evidence.get("abstained")]


def _json_safe(value: Any) -> Any:
    """Return `value` with every NaN, at any depth, as None (JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value


def _finite(stats: dict[str, Any]) -> dict[str, Any]:
    return {
        key: None if isinstance(value, float) and math.isnan(value) else value
        for key, value in stats.items()
    }
