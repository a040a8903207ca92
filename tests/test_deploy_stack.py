"""deploy/ stays true: the compose stack, the Kubernetes and Slurm recipes, and the sample run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .helpers.deploy_files import (
    DEPLOY,
    load_yaml,
    load_yaml_all,
)

DATA_FILES = sorted(p for p in DEPLOY.rglob("*") if p.suffix in {".yaml", ".yml", ".json"})
COMPOSE = DEPLOY / "compose" / "compose.yaml"
KUBERNETES = DEPLOY / "kubernetes"
COLLECTOR_CONFIGS = [
    DEPLOY / "collector" / "agent.yaml",
    DEPLOY / "collector" / "gateway.yaml",
    DEPLOY / "compose" / "jaeger.yaml",  # Jaeger v2 is a collector distribution
]
# An image reference with an explicit version tag (never `latest`).
PINNED = re.compile(r"^[\w.-]+(?:/[\w.-]+)*:v?\d[\w.-]*$")
ENV_REFERENCE = re.compile(r"\$\{([^}]*)\}")
ENV_WITH_DEFAULT = re.compile(r"^env:([A-Z_][A-Z0-9_]*):-(.+)$")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command and return its result, output as text."""
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env, check=False)


# -- compose --------------------------------------------------------------------------------


def resolve_default(text: str) -> str:
    """Resolve compose's `${VAR:-default}` to the default."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)


def test_compose_pins_images_binds_localhost_and_mounts_files_that_exist() -> None:
    """Images carry versions, published ports bind 127.0.0.1 by default, mounts exist."""
    compose = load_yaml(COMPOSE)
    services = compose["services"]
    problems = []
    for name, service in services.items():
        if not PINNED.match(service["image"]):
            problems.append(f"{name}: image {service['image']} has no version tag")
        for port in service.get("ports", []):
            if not resolve_default(port).startswith("127.0.0.1:"):
                problems.append(f"{name}: port {port} is not bound to 127.0.0.1")
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                if not (COMPOSE.parent / source).exists():
                    problems.append(f"{name}: {source} does not exist")
            elif source not in compose["volumes"]:
                problems.append(f"{name}: volume {source} is not declared")
        problems += [
            f"{name}: depends on unknown {d}"
            for d in service.get("depends_on", [])
            if d not in services
        ]
    assert problems == []
    assert {name: s["image"] for name, s in services.items()} == {
        "agent": "otel/opentelemetry-collector-contrib:0.128.0",
        "gateway": "otel/opentelemetry-collector-contrib:0.128.0",
        "tempo-init": "grafana/tempo:2.8.1",
        "tempo": "grafana/tempo:2.8.1",
        "jaeger": "jaegertracing/jaeger:2.8.0",
        "prometheus": "prom/prometheus:v3.5.0",
        "grafana": "grafana/grafana:12.0.2",
    }


def compose_command() -> list[str]:
    """Return a compose CLI that can render the file (plugin or standalone), or skip."""
    docker = shutil.which("docker")
    if docker and run(docker, "compose", "version").returncode == 0:
        return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    if standalone:
        return [standalone]
    pytest.skip(
        "no compose CLI here (`docker compose` plugin or docker-compose): the compose file is "
        "checked structurally by the test above only"
    )


def test_docker_compose_renders_the_stack() -> None:
    """`docker compose config` (client only, no engine) accepts the compose file."""
    rendered = run(*compose_command(), "-f", str(COMPOSE), "config", "--quiet")
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr


# -- Kubernetes and Slurm -------------------------------------------------------------------


def containers_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the containers of a workload (Deployment, DaemonSet, Job or PyTorchJob)."""
    spec = doc["spec"]
    if doc["kind"] == "PyTorchJob":
        return [
            c
            for r in spec["pytorchReplicaSpecs"].values()
            for c in r["template"]["spec"]["containers"]
        ]
    return list(spec["template"]["spec"]["containers"])


def env_problems(container: dict[str, Any]) -> list[str]:
    """Return `$(VAR)` references to variables not defined earlier in the container's env."""
    problems, defined = [], set()
    for entry in container.get("env", []):
        for name in re.findall(r"\$\((\w+)\)", entry.get("value", "")):
            if name not in defined:
                problems.append(
                    f"{container['name']}: {entry['name']} uses $({name}) before it is set"
                )
        defined.add(entry["name"])
    return problems


def test_kubernetes_manifests_wire_the_configmap_and_the_node_agent() -> None:
    """Images pinned, the generated ConfigMap mounted, env wired to the agent's hostPort."""
    kustomization = load_yaml(KUBERNETES / "kustomization.yaml")
    (generator,) = kustomization["configMapGenerator"]
    keys = {Path(f).name for f in generator["files"]}
    problems = [f"missing {f}" for f in generator["files"] if not (KUBERNETES / f).exists()]
    problems += [
        f"missing {r}" for r in kustomization["resources"] if not (KUBERNETES / r).exists()
    ]
    workloads = [
        doc
        for name in ("agent.yaml", "gateway.yaml", "training-job.yaml", "pytorchjob.yaml")
        for doc in load_yaml_all(KUBERNETES / name)
        if doc["kind"] != "Service"
    ]
    host_ports, endpoints = set(), set()
    for doc in workloads:
        for container in containers_of(doc):
            if not PINNED.match(container["image"]):
                problems.append(f"{doc['metadata']['name']}: image {container['image']} unpinned")
            problems += env_problems(container)
            env = {e["name"]: e for e in container.get("env", [])}
            if doc["kind"] in {"DaemonSet", "Deployment"}:
                volumes = {v["name"]: v for v in doc["spec"]["template"]["spec"]["volumes"]}
                (mount,) = container["volumeMounts"]
                config = container["args"][0].removeprefix("--config=")
                if volumes[mount["name"]]["configMap"]["name"] != generator["name"]:
                    problems.append(f"{doc['metadata']['name']}: not the generated ConfigMap")
                if Path(config).parent != Path(mount["mountPath"]) or Path(config).name not in keys:
                    problems.append(f"{doc['metadata']['name']}: {config} is not in the ConfigMap")
                host_ports |= {p["hostPort"] for p in container["ports"] if "hostPort" in p}
            else:
                endpoints.add(env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"])
                host_ip = env["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"]
                if host_ip != "status.hostIP" or "LOOPTRACE_RUN_ID" not in env:
                    problems.append(f"{doc['metadata']['name']}: HOST_IP or LOOPTRACE_RUN_ID unset")
    assert problems == []
    assert (host_ports, endpoints) == ({4317, 4318}, {"http://$(HOST_IP):4318"})


def test_slurm_recipe_is_valid_bash() -> None:
    """The sbatch script parses as bash."""
    checked = run("bash", "-n", str(DEPLOY / "slurm" / "looptrace.sbatch"))
    assert checked.returncode == 0, checked.stderr


# -- the sample -----------------------------------------------------------------------------


def test_sample_training_script_runs_as_two_ranks() -> None:
    """deploy/train.py runs simulated as ranks 0 and 1; rank 0 reports every window."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LOOPTRACE_"))}
    args = [sys.executable, str(DEPLOY / "train.py"), "--simulate", "--steps", "6"]
    args += ["--reset-every", "3", "--data-ms", "1"]
    ranks = [
        subprocess.Popen(
            args,
            env={**base, "RANK": str(r), "WORLD_SIZE": "2", "LOOPTRACE_RUN_ID": "sample"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    outputs = [p.communicate(timeout=60) for p in ranks]
    results = [(p.returncode, out, err) for p, (out, err) in zip(ranks, outputs, strict=True)]
    assert [rc for rc, _, _ in results] == [0, 0], results
    lines = results[0][1].splitlines()
    assert [line.split()[:2] for line in lines[:-1]] == [["step", "3"], ["step", "6"]]
    assert "dropped_spans=0" in lines[-1]
    assert results[1][1] == ""


def test_sample_trains_a_ddp_model_under_torchrun_and_names_the_straggler() -> None:
    """With torch, two gloo ranks train under torchrun; rank 0 reports rank 1's slow data."""
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LOOPTRACE_"))}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    result = subprocess.run(
        [
            *launcher,
            str(DEPLOY / "train.py"),
            "--steps",
            "6",
            "--reset-every",
            "3",
            "--data-ms",
            "5",
        ],
        env={**env, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    reports = [line for line in result.stdout.splitlines() if line.startswith("step")]
    assert [line.split()[1] for line in reports] == ["3", "6"]
    assert all("data: rank 1 at" in line for line in reports), reports
