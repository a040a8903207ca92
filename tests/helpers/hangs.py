"""Reading the hang watchdog's lines back, waiting on them with a deadline."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.helpers.processes import bare_env

T = TypeVar("T")


def lines(path: Path) -> list[dict[str, Any]]:
    """Return the whole JSON lines of `path` (a line still being written is left out)."""
    if not path.exists():
        return []
    text = path.read_text()
    whole = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


def hang_lines(path: Path, kind: str = "looptrace.hang") -> list[dict[str, Any]]:
    """Return the lines of `kind` of a snapshot file."""
    return [line for line in lines(path) if line.get("kind") == kind]


def wait_for(find: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Return `find()` once it is not None (or empty), polling; fail past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = find()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s} s")
        time.sleep(0.05)


def wait_printed(proc: subprocess.Popen[bytes], text: bytes, timeout_s: float) -> None:
    """Wait until `proc` prints a line holding `text` on its stdout; fail past `timeout_s`."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no {text!r} printed within {timeout_s} s")
        ready, _, _ = select.select([proc.stdout], [], [], remaining)
        if ready:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"the process exited before printing {text!r}")
            if text in line:
                return


def standing_hangs(path: Path) -> list[dict[str, Any]]:
    """Return the hang lines of a snapshot file whose step no hang_cleared line has ended."""
    cleared = {line.get("step") for line in hang_lines(path, "looptrace.hang_cleared")}
    return [line for line in hang_lines(path) if line.get("step") not in cleared]


def start_ranks(worker: Path, world: int, args: list[str]) -> list[subprocess.Popen[bytes]]:
    """Start `world` gloo ranks of `worker` with `args`, as torchrun would set their variables."""
    procs = []
    for rank in range(world):
        env = bare_env(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world),
                "GLOO_SOCKET_IFNAME": "lo",
            }
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(worker), *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    return procs


def kill_all(procs: list[subprocess.Popen[bytes]]) -> list[str]:
    """SIGKILL every process still running; return what each printed."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    return [proc.communicate(timeout=60)[0].decode(errors="replace") for proc in procs]


def free_ports(count: int) -> int:
    """Return a port from which `count` consecutive ports are free on 127.0.0.1."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count > 65535:
            continue
        try:
            for port in range(base, base + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError(f"no {count} consecutive free ports")


def step_open_seconds(port: int) -> float | None:
    """Return the largest `looptrace_step_open_seconds` an endpoint serves (None: none)."""
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    values = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "looptrace_step_open_seconds"
    ]
    return max(values, default=None)
