"""deploy/ stays true: its files parse; Prometheus and the collectors are wired as they should."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers.deploy_files import (
    DEPLOY,
    PROMETHEUS_CONFIG,
    RULES,
    load_yaml,
    load_yaml_all,
    prometheus_config,
    sbatch_text,
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
    assert "SUCCESS: 7 rules found" in rules.stdout + rules.stderr


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
