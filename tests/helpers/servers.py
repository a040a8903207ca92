"""Start and stop the real backends the export tests talk to: Prometheus and MLflow.

`.ci/run` installs both and names them in `LOOPTRACE_TEST_PROMETHEUS` and
`LOOPTRACE_TEST_MLFLOW`; a test skips, saying why, only where neither the variable nor (for
Prometheus) a `prometheus` on the PATH is there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .deploy_files import prometheus_config
from .otlp_server import LOCALHOST, free_port


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
    """GET (or POST `body` as JSON to) `url` and return the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: server exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url}: not ready after {timeout} s:\n{log.read_text()[-3000:]}")


class Server:
    """A server process started in its own session, stopped with its whole process group."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.log = cwd / "server.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                args,
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        """Terminate the server and everything it started; kill it if it lingers."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=15)


class Prometheus(Server):
    """A real Prometheus running deploy/'s config, scraping its targets every second.

    `features` are passed as `--enable-feature` flags (e.g. `exemplar-storage`).
    """

    def __init__(
        self,
        binary: str,
        target_ports: list[int],
        directory: Path,
        features: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.target_ports = target_ports
        config = directory / "prometheus.yml"
        config.write_text(prometheus_config([f"{LOCALHOST}:{port}" for port in target_ports]))
        super().__init__(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address={LOCALHOST}:{self.port}",
                *(f"--enable-feature={feature}" for feature in features),
            ],
            cwd=directory,
        )
        _wait_ready(f"{self.url}/-/ready", self.process, 60, self.log)

    @property
    def url(self) -> str:
        """Return the base URL of the HTTP API."""
        return f"http://{LOCALHOST}:{self.port}"

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Run an instant query and return its result vector."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        answer = http_json(url)
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def query_exemplars(self, promql: str, start_s: float, end_s: float) -> list[dict[str, Any]]:
        """Return `/api/v1/query_exemplars` for a selector: series labels with their exemplars."""
        query = urllib.parse.urlencode({"query": promql, "start": start_s, "end": end_s})
        answer = http_json(f"{self.url}/api/v1/query_exemplars?{query}")
        assert answer["status"] == "success", answer
        return list(answer["data"])


class Mlflow(Server):
    """A real MLflow tracking server on SQLite."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        super().__init__(
            [
                binary,
                "server",
                "--host",
                LOCALHOST,
                "--port",
                str(self.port),
                "--workers",
                "1",
                "--backend-store-uri",
                f"sqlite:///{directory / 'mlflow.db'}",
                "--artifacts-destination",
                str(directory / "artifacts"),
            ],
            cwd=directory,
            env=env,
        )
        _wait_ready(f"{self.url}/health", self.process, 120, self.log)

    @property
    def url(self) -> str:
        """Return the base URL of the tracking server."""
        return f"http://{LOCALHOST}:{self.port}"

    def create_experiment(self, name: str) -> str:
        """Create an experiment and return its id."""
        answer = http_json(f"{self.url}/api/2.0/mlflow/experiments/create", {"name": name})
        return str(answer["experiment_id"])

    def traces(self, experiment_id: str) -> list[dict[str, Any]]:
        """Return every trace of an experiment with its spans (OTLP JSON)."""
        location = {
            "type": "MLFLOW_EXPERIMENT",
            "mlflow_experiment": {"experiment_id": experiment_id},
        }
        found = http_json(
            f"{self.url}/api/3.0/mlflow/traces/search",
            {"locations": [location], "max_results": 100},
        )
        traces = []
        for info in found.get("traces", []):
            query = urllib.parse.urlencode({"trace_id": info["trace_id"]})
            traces.append(http_json(f"{self.url}/api/3.0/mlflow/traces/get?{query}")["trace"])
        return traces


def binary(variable: str, fallback: str | None = None) -> str:
    """Return the executable named by `variable` (or found on the PATH), or skip the test."""
    path = os.environ.get(variable) or (shutil.which(fallback) if fallback else None)
    if not path:
        where = f" and no `{fallback}` on the PATH" if fallback else ""
        pytest.skip(f"{variable} is not set{where}; .ci/run installs it and sets it")
    return path
