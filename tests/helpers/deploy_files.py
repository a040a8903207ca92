"""The files of deploy/ as data, for the tests that keep them true.

The Prometheus config with test targets; the metric names, labels and span attributes that the
dashboard, the rules and the data sources use.

`prometheus_config()` is how tests run a real Prometheus on deploy/'s own scrape config:
the targets of its `looptrace` job are replaced, the intervals shortened and the rule files
made absolute, nothing else changes.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import promql_parser
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
RULES = DEPLOY / "prometheus" / "rules" / "looptrace.rules.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "looptrace.json"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "datasources.yaml"
SCRAPE_JOB = "looptrace"
# Labels Prometheus (or the gateway's exporter) attaches to every scraped series.
TARGET_LABELS = frozenset({"job", "instance"})


def load_yaml(path: Path) -> Any:
    """Return the single YAML document in `path`."""
    return yaml.safe_load(path.read_text())


def load_json(path: Path) -> Any:
    """Return the JSON document in `path`."""
    return json.loads(path.read_text())


def prometheus_config(targets: Sequence[str], *, interval: str = "1s") -> str:
    """Return deploy/'s Prometheus config scraping `targets` ("host:port") every `interval`.

    The `looptrace` job gets exactly these targets; the scrape and rule-evaluation
    intervals become `interval`; rule files become absolute paths, so the config can be
    written anywhere.
    """
    config = load_yaml(PROMETHEUS_CONFIG)
    config["global"]["scrape_interval"] = interval
    config["global"]["evaluation_interval"] = interval
    base = PROMETHEUS_CONFIG.parent
    config["rule_files"] = [str(base / name) for name in config.get("rule_files", [])]
    jobs = [job for job in config["scrape_configs"] if job["job_name"] == SCRAPE_JOB]
    if len(jobs) != 1:
        raise ValueError(f"{PROMETHEUS_CONFIG}: expected one job named {SCRAPE_JOB!r}")
    jobs[0]["static_configs"] = [{"targets": list(targets)}]
    return yaml.safe_dump(config, sort_keys=False)


# -- PromQL ---------------------------------------------------------------------------------


@dataclass
class Usage:
    """Metric names and label names that some queries use."""

    metrics: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)

    def add(self, other: Usage) -> None:
        """Add another usage to this one."""
        self.metrics |= other.metrics
        self.labels |= other.labels


_LABEL_FUNCTIONS = {"label_replace": (3,), "label_join": (3, 4, 5, 6, 7, 8, 9)}


def promql_usage(expr: str) -> Usage:
    """Return the metric names and label names a PromQL expression reads.

    Labels count wherever they appear: matchers, `by`/`without`, `on`/`ignoring`,
    `group_left`/`group_right` and the source labels of `label_replace`/`label_join`.
    """
    usage = Usage()

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                usage.metrics.add(node.name)
            matchers = [
                *node.matchers.matchers,
                *(m for ms in node.matchers.or_matchers for m in ms),
            ]
            for matcher in matchers:
                if matcher.name == "__name__":
                    usage.metrics.add(matcher.value)
                else:
                    usage.labels.add(matcher.name)
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            usage.labels.update(node.modifier.labels)
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            if node.modifier.matching is not None:
                usage.labels.update(node.modifier.matching.labels)
            usage.labels.update(node.modifier.group_labels or [])
        elif isinstance(node, promql_parser.Call) and node.func.name in _LABEL_FUNCTIONS:
            for index in _LABEL_FUNCTIONS[node.func.name]:
                if index < len(node.args) and isinstance(
                    node.args[index], promql_parser.StringLiteral
                ):
                    usage.labels.add(node.args[index].val)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return usage


# Grafana's variables, replaced by values of the right kind before parsing.
_GRAFANA_INTERVALS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
_GRAFANA_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)")
_LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_TEMPLATE_LABEL = re.compile(r"\$labels\.(\w+)")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*(\w+)\s*\)\s*$", re.DOTALL)


def grafana_expr(expr: str, values: dict[str, str] | None = None) -> str:
    """Replace Grafana's `$variables` in a query: intervals by durations, others by `values`.

    A variable without a value becomes `x`: queries use them inside label values.
    """
    values = values or {}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return values.get(name) or _GRAFANA_INTERVALS.get(name) or "x"

    return _GRAFANA_VARIABLE.sub(replace, expr)


@dataclass(frozen=True)
class Query:
    """One PromQL query of the dashboard, with where it is and its legend."""

    where: str
    expr: str
    legend: str = ""


def dashboard_queries(dashboard: dict[str, Any]) -> list[Query]:
    """Return every Prometheus query of the dashboard's panels (raw, with `$variables`)."""
    queries = []
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            if target.get("datasource", panel.get("datasource", {})).get("type") == "prometheus":
                legend = target.get("legendFormat", "")
                queries.append(Query(f"panel {panel['title']!r}", target["expr"], legend))
    return queries


def dashboard_variable_queries(dashboard: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Return `(variable, selector, label)` of every `label_values(selector, label)` variable."""
    found = []
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        match = _LABEL_VALUES.match(text)
        if match:
            found.append((variable["name"], match.group(1), match.group(2)))
    return found


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def datasource_queries(datasources: dict[str, Any]) -> list[Query]:
    """Return the trace-to-metrics queries of the data sources, `$__tags` made a selector."""
    queries = []
    for source in datasources["datasources"]:
        links = source.get("jsonData", {}).get("tracesToMetrics")
        if not links:
            continue
        tags = ", ".join(f'{tag.get("value") or tag["key"]}="x"' for tag in links["tags"])
        for query in links["queries"]:
            expr = query["query"].replace("$$__tags", tags).replace("$__tags", tags)
            queries.append(Query(f"data source {source['name']!r}: {query['name']!r}", expr))
    return queries


def legend_labels(legend: str) -> set[str]:
    """Return the labels a legend format (`rank {{looptrace_rank}}`) refers to."""
    return set(_LEGEND_LABEL.findall(legend))


def rules_usage(rules: dict[str, Any]) -> tuple[Usage, set[str]]:
    """Return what the rules read, and the names of the series they record."""
    usage, recorded = Usage(), set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            usage.add(promql_usage(rule["expr"]))
            if "record" in rule:
                recorded.add(rule["record"])
            for text in [*rule.get("labels", {}).values(), *rule.get("annotations", {}).values()]:
                usage.labels.update(_TEMPLATE_LABEL.findall(str(text)))
    return usage, recorded


# -- TraceQL --------------------------------------------------------------------------------

_TRACEQL_ATTRIBUTE = re.compile(r"\b(span|resource)\.([A-Za-z_][\w.]*\w)")


def trace_attributes(dashboard: dict[str, Any], datasources: dict[str, Any]) -> set[str]:
    """Return `scope.attribute` for every attribute the trace queries and links use.

    Sources: TraceQL of Tempo targets, TraceQL inside data-link URLs (decoded), and the span
    tags the data sources map to metric labels (scope `span`).
    """
    texts = []
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            if target.get("queryType") == "traceql":
                texts.append(target["query"])
        for link in panel.get("fieldConfig", {}).get("defaults", {}).get("links", []):
            texts.append(urllib.parse.unquote(link["url"]))
    found = {
        f"{scope}.{name}" for text in texts for scope, name in _TRACEQL_ATTRIBUTE.findall(text)
    }
    for source in datasources["datasources"]:
        links = source.get("jsonData", {}).get("tracesToMetrics") or {}
        found.update(f"span.{tag['key']}" for tag in links.get("tags", []))
    return found


def load_yaml_all(path: Path) -> list[dict[str, Any]]:
    """Return every document of a multi-document YAML file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def sbatch_text() -> str:
    """Return the Slurm recipe."""
    return (DEPLOY / "slurm" / "looptrace.sbatch").read_text()
