"""deploy/ stays true: its configs parse and hold together, and they query what looptrace emits."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .deploy_files import (
    DEPLOY,
    PROMETHEUS_CONFIG,
    RULES,
    load_yaml,
    prometheus_config,
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


def test_deploy_holds_the_listed_files() -> None:
    """deploy/ holds the compose stack, collector, Prometheus, Grafana, Slurm and k8s files."""
    files = sorted(
        str(p.relative_to(DEPLOY))
        for p in DEPLOY.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert files == [
        "README.md",
        "collector/agent.yaml",
        "collector/gateway.yaml",
        "compose/compose.yaml",
        "compose/jaeger.yaml",
        "compose/tempo.yaml",
        "grafana/dashboards/looptrace.json",
        "grafana/provisioning/dashboards/looptrace.yaml",
        "grafana/provisioning/datasources/datasources.yaml",
        "kubernetes/agent.yaml",
        "kubernetes/gateway.yaml",
        "kubernetes/kustomization.yaml",
        "kubernetes/namespace.yaml",
        "kubernetes/pytorchjob.yaml",
        "kubernetes/training-job.yaml",
        "prometheus/prometheus.yml",
        "prometheus/rules/looptrace.rules.yml",
        "slurm/looptrace.sbatch",
        "train.py",
    ]


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_and_json_file_parses(path: Path) -> None:
    """Each YAML or JSON file parses into non-empty mappings (YAML: every document)."""
    text = path.read_text()
    documents = [json.loads(text)] if path.suffix == ".json" else list(yaml.safe_load_all(text))
    assert documents
    assert all(isinstance(doc, dict) and doc for doc in documents)


# -- Prometheus -----------------------------------------------------------------------------


def promtool() -> str:
    """Return Prometheus's promtool, or skip."""
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is missing; .ci/run installs Debian's prometheus package")
    return path


def test_promtool_accepts_the_prometheus_config_and_its_rules() -> None:
    """`promtool check config` passes on deploy/prometheus/prometheus.yml and finds the rules."""
    config = run(promtool(), "check", "config", str(PROMETHEUS_CONFIG))
    rules = run(promtool(), "check", "rules", str(RULES))
    assert (config.returncode, rules.returncode) == (0, 0), config.stdout + config.stderr
    assert "SUCCESS: 1 rule files found" in config.stdout + config.stderr
    assert "SUCCESS: 6 rules found" in rules.stdout + rules.stderr


def test_prometheus_config_takes_test_targets(tmp_path: Path) -> None:
    """Substitution changes the looptrace job's targets, the intervals and the rule paths only."""
    text = prometheus_config(["127.0.0.1:9464", "127.0.0.1:9465"], interval="1s")
    assert yaml.safe_load(text) == {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "looptrace",
                "honor_labels": True,
                "sample_limit": 2_000_000,
                "label_limit": 16,
                "label_value_length_limit": 1024,
                "static_configs": [{"targets": ["127.0.0.1:9464", "127.0.0.1:9465"]}],
            }
        ],
    }
    config = tmp_path / "prometheus.yml"
    config.write_text(text)
    checked = run(promtool(), "check", "config", str(config))
    assert checked.returncode == 0, checked.stdout + checked.stderr


# -- collector ------------------------------------------------------------------------------

_KINDS = ("receivers", "processors", "exporters", "connectors")


def wiring_problems(config: dict[str, Any]) -> list[str]:
    """Return what is wrong with a collector config's wiring; empty when nothing is."""
    problems = []
    defined = {kind: set(config.get(kind) or {}) for kind in _KINDS}
    used: dict[str, set[str]] = {kind: set() for kind in _KINDS}
    connector_sides: dict[str, set[str]] = {}
    for name, pipeline in config["service"]["pipelines"].items():
        problems += pipeline_problems(name, pipeline, defined, used, connector_sides)
    for kind in _KINDS:
        problems += [
            f"{kind[:-1]} {c} is defined but in no pipeline"
            for c in sorted(defined[kind] - used[kind])
        ]
    for connector, sides in sorted(connector_sides.items()):
        if sides != {"receivers", "exporters"}:
            problems.append(f"connector {connector} must end one pipeline and start another")
        if connector.split("/")[0] == "spanmetrics":
            problems.append(f"connector {connector}: looptrace's histograms already count spans")
    extensions = set(config.get("extensions") or {})
    enabled = set(config["service"].get("extensions") or [])
    problems += [f"extension {e} is enabled but not defined" for e in sorted(enabled - extensions)]
    problems += [f"extension {e} is defined but not enabled" for e in sorted(extensions - enabled)]
    return problems


def pipeline_problems(
    name: str,
    pipeline: dict[str, list[str]],
    defined: dict[str, set[str]],
    used: dict[str, set[str]],
    connector_sides: dict[str, set[str]],
) -> list[str]:
    """Return one pipeline's problems, noting in `used` what it uses."""
    problems = []
    if name.split("/", maxsplit=1)[0] not in {"traces", "metrics", "logs"}:
        problems.append(f"pipeline {name}: not a traces, metrics or logs pipeline")
    for role in ("receivers", "processors", "exporters"):
        for component in pipeline.get(role) or []:
            if role != "processors" and component in defined["connectors"]:
                used["connectors"].add(component)
                connector_sides.setdefault(component, set()).add(role)
            elif component in defined[role]:
                used[role].add(component)
            else:
                problems.append(f"pipeline {name}: {role[:-1]} {component} is not defined")
    if not pipeline.get("receivers") or not pipeline.get("exporters"):
        problems.append(f"pipeline {name}: needs receivers and exporters")
    processors = pipeline.get("processors") or []
    limiter = [p for p in processors if p.split("/")[0] == "memory_limiter"]
    if limiter and processors[0] != limiter[0]:
        problems.append(f"pipeline {name}: memory_limiter must come first")
    return problems


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_collector_config_is_wired(path: Path) -> None:
    """Every component a pipeline uses is defined and every defined one is used."""
    assert wiring_problems(load_yaml(path)) == []


def test_wiring_check_reports_each_kind_of_mistake() -> None:
    """The wiring check names undefined, unused, misplaced and double-counting components."""
    broken = {
        "receivers": {"otlp": None, "unused": None},
        "processors": {"batch": None, "memory_limiter": None},
        "exporters": {"otlp": None},
        "connectors": {"spanmetrics": None},
        "extensions": {"health_check": None},
        "service": {
            "extensions": ["pprof"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch", "memory_limiter"],
                    "exporters": ["otlp", "spanmetrics", "missing"],
                },
                "spans": {"receivers": ["otlp"], "exporters": []},
            },
        },
    }
    assert wiring_problems(broken) == [
        "pipeline traces: exporter missing is not defined",
        "pipeline traces: memory_limiter must come first",
        "pipeline spans: not a traces, metrics or logs pipeline",
        "pipeline spans: needs receivers and exporters",
        "receiver unused is defined but in no pipeline",
        "connector spanmetrics must end one pipeline and start another",
        "connector spanmetrics: looptrace's histograms already count spans",
        "extension pprof is enabled but not defined",
        "extension health_check is defined but not enabled",
    ]


def strings(value: Any) -> list[str]:
    """Return every string in a parsed YAML document (values only, not keys)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def env_defaults(path: Path) -> dict[str, str]:
    """Return `{variable: default}` of a collector config's `${env:VAR:-default}` references."""
    found = {}
    for reference in ENV_REFERENCE.findall(" ".join(strings(load_yaml(path)))):
        match = ENV_WITH_DEFAULT.match(reference)
        assert match, f"{path.name}: ${{{reference}}} needs the form env:NAME:-default"
        found[match.group(1)] = match.group(2)
    return found


def test_collector_settings_have_defaults_and_every_setup_sets_only_those() -> None:
    """Collector env references carry defaults; compose, k8s and Slurm set no other LOOPTRACE_*."""
    agent = env_defaults(DEPLOY / "collector" / "agent.yaml")
    gateway = env_defaults(DEPLOY / "collector" / "gateway.yaml")
    assert agent == {
        "LOOPTRACE_AGENT_HEALTH": "127.0.0.1:13133",
        "LOOPTRACE_AGENT_HOST": "127.0.0.1",
        "LOOPTRACE_AGENT_GRPC_PORT": "4317",
        "LOOPTRACE_AGENT_HTTP_PORT": "4318",
        "LOOPTRACE_GATEWAY": "gateway:4317",
        "LOOPTRACE_GATEWAY_INSECURE": "true",
    }
    assert gateway == {"LOOPTRACE_TEMPO": "tempo:4317", "LOOPTRACE_JAEGER": "jaeger:4317"}
    services = load_yaml(COMPOSE)["services"]
    containers = {
        doc["metadata"]["name"]: doc["spec"]["template"]["spec"]["containers"][0]
        for doc in load_yaml_all(KUBERNETES / "agent.yaml")
        + load_yaml_all(KUBERNETES / "gateway.yaml")
        if doc["kind"] in {"DaemonSet", "Deployment"}
    }
    slurm = set(re.findall(r"export (LOOPTRACE_AGENT_\w+|LOOPTRACE_GATEWAY)\b", sbatch_text()))
    set_by = {
        "compose agent": set(services["agent"]["environment"]),
        "compose gateway": set(services["gateway"]["environment"]),
        "k8s agent": {e["name"] for e in containers["looptrace-agent"]["env"]},
        "k8s gateway": {e["name"] for e in containers["looptrace-gateway"]["env"]},
        "slurm agent": slurm,
    }
    reads = {"agent": set(agent), "gateway": set(gateway)}
    assert {
        who: sorted(
            v for v in names if v.startswith("LOOPTRACE_") and v not in reads[who.split()[1]]
        )
        for who, names in set_by.items()
    } == {who: [] for who in set_by}
    assert slurm == {
        "LOOPTRACE_AGENT_HOST",
        "LOOPTRACE_AGENT_GRPC_PORT",
        "LOOPTRACE_AGENT_HTTP_PORT",
        "LOOPTRACE_AGENT_HEALTH",
        "LOOPTRACE_GATEWAY",
    }


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


def load_yaml_all(path: Path) -> list[dict[str, Any]]:
    """Return every document of a multi-document YAML file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


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


def sbatch_text() -> str:
    """Return the Slurm recipe."""
    return (DEPLOY / "slurm" / "looptrace.sbatch").read_text()


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
