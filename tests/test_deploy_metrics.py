"""deploy/'s dashboard, rules and data sources read only what looptrace really emits.

The checks compare against real output: spans and OTLP metrics from a looptrace run, the text
its Prometheus endpoint serves, and a real Prometheus scraping that endpoint with deploy/'s
own scrape config and rules.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import looptrace
from looptrace._export.exemplars import TraceExemplar
from looptrace.testing import FakeClock, capture

from .helpers.deploy_files import (
    DASHBOARD,
    DATASOURCES,
    RULES,
    TARGET_LABELS,
    Usage,
    dashboard_queries,
    dashboard_variable_queries,
    datasource_queries,
    grafana_expr,
    legend_labels,
    load_json,
    load_yaml,
    promql_usage,
    rules_usage,
    trace_attributes,
)
from .helpers.otlp_server import OtlpReceiver
from .helpers.ports import LOCALHOST, free_port
from .helpers.servers import Prometheus

DURATION = "looptrace_section_duration_seconds"
WINDOW = "looptrace_section_window_duration_seconds"
DROPPED = "looptrace_spans_dropped_total"
JOB_DURATION = "looptrace_job_section_duration_seconds"
# what a rank serves after a cross-rank window: its detail, its few series, the job's series
SERVED = {
    f"{DURATION}_bucket",
    f"{DURATION}_count",
    f"{DURATION}_sum",
    WINDOW,
    DROPPED,
    "looptrace_rank_steps_total",
    "looptrace_rank_step_window_duration_seconds",
    "looptrace_rank_outside_wait_seconds_total",
    f"{JOB_DURATION}_bucket",
    f"{JOB_DURATION}_count",
    f"{JOB_DURATION}_sum",
    "looptrace_job_section_window_duration_seconds",
    "looptrace_memory_window_bytes",
    "looptrace_step_open_seconds",  # read at the scrape: a step is open
    "looptrace_open_section_seconds",
}


@pytest.fixture
def job_group(tmp_path: Path) -> Iterator[None]:
    """Run the test in a real one-rank gloo process group: reset(across_ranks=True) reduces.

    The job's series are served from that reduce; with one rank they hold that rank's own.
    """
    dist = pytest.importorskip("torch.distributed", reason="needs torch (the test extra)")
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_promql_usage_finds_every_kind_of_reference() -> None:
    """Names and labels come from selectors, by/without, on/group_left and label_replace."""
    usage = promql_usage(
        'topk(3, sum by (a) (rate(m_sum{b="1"}[5m])) / on (c) group_left (d) '
        'quantile without (e) (0.5, {__name__="n", f!="2"})) '
        'or label_replace(o, "new", "$1", "g", "(.*)")'
    )
    assert usage == Usage(metrics={"m_sum", "n", "o"}, labels={"a", "b", "c", "d", "e", "f", "g"})


def deploy_usage() -> tuple[Usage, set[str]]:
    """Return what the dashboard, the rules and the data sources read, and the recorded names."""
    dashboard, datasources = load_json(DASHBOARD), load_yaml(DATASOURCES)
    usage, recorded = rules_usage(load_yaml(RULES))
    for query in dashboard_queries(dashboard) + datasource_queries(datasources):
        usage.add(promql_usage(grafana_expr(query.expr)))
        usage.labels |= legend_labels(query.legend)
    for _, selector, label in dashboard_variable_queries(dashboard):
        usage.add(promql_usage(grafana_expr(selector)))
        usage.labels.add(label)
    return usage, recorded


def laps(lt: looptrace.Looptrace, clock: Any, steps: int, data_s: float) -> None:
    """Run `steps` training laps with nested sections on a fake clock."""
    train = lt.timer("train")
    forward = train.timer("forward")
    for step in range(steps):
        train.record("data")
        clock.advance(data_s)
        train.record("forward")
        forward.record("encoder")
        clock.advance(0.02)
        train.record("backward")
        clock.advance(0.03)
        with train.section("optimizer"):
            clock.advance(0.005)
        if step < steps - 1:
            train.record()  # the lap ends and the next starts
    train.stop()


def prometheus_names(request: Any) -> tuple[set[str], set[str]]:
    """Return the series names and labels the collector's prometheus exporter makes of a push.

    Dots become underscores, unit s adds `_seconds`, `{span}` adds nothing, a monotonic sum
    adds `_total`, a histogram gives `_bucket`, `_count` and `_sum` (and the label `le`).
    """
    names, labels = set(), set()
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                family = (
                    metric.name.replace(".", "_")
                    + {"s": "_seconds", "By": "_bytes", "{span}": "", "{step}": "", "{rank}": ""}[
                        metric.unit
                    ]
                )
                kind = metric.WhichOneof("data")
                if kind == "histogram":
                    names |= {f"{family}_{suffix}" for suffix in ("bucket", "count", "sum")}
                    labels.add("le")
                elif kind == "sum" and metric.sum.is_monotonic:
                    names.add(f"{family}_total")
                else:
                    names.add(family)
                for point in getattr(metric, kind).data_points:
                    labels |= {a.key.replace(".", "_") for a in point.attributes}
    return names, labels


def test_otlp_push_translates_to_what_the_dashboard_reads(job_group: None) -> None:
    """The OTLP metrics push, named as the collector names it, is what deploy/ reads."""
    clock = FakeClock()
    with OtlpReceiver("grpc") as receiver:
        lt = looptrace.configure(
            tracer_provider=TracerProvider(),
            clock=clock,
            rank=looptrace.RankInfo(rank=1, world_size=2),
            otlp_endpoint=receiver.endpoint,
            otlp_protocol="grpc",
            traces_exporter="none",
        )
        laps(lt, clock, 3, 0.01)
        lt.timer("train").record("data")  # a step open at the push: its age is pushed
        lt.reset(across_ranks=True)
        assert receiver.wait_for_metrics(lambda m: "looptrace.step.open" in m)
        names, labels = prometheus_names(receiver.metric_requests[-1])
        lt.shutdown()
    usage, recorded = deploy_usage()
    assert names == SERVED
    assert {
        "unknown metrics": sorted(usage.metrics - names - recorded),
        "unknown labels": sorted(usage.labels - labels - TARGET_LABELS),
        "pushed but unused": sorted(names - usage.metrics),
    } == {"unknown metrics": [], "unknown labels": [], "pushed but unused": []}


def test_trace_queries_use_span_attributes_looptrace_emits() -> None:
    """Every span attribute in TraceQL, data links and trace-to-metrics tags is on real spans."""
    cap = capture(rank=looptrace.RankInfo(rank=0, world_size=2))
    laps(cap.lt, cap.clock, 2, 0.01)
    cap.lt.shutdown()
    emitted = {
        f"span.{k}" for span in cap.spans.get_finished_spans() for k in span.attributes or {}
    }
    used = trace_attributes(load_json(DASHBOARD), load_yaml(DATASOURCES))
    assert {"span.looptrace.path", "span.looptrace.rank"} <= used
    assert sorted(used - emitted) == []


def test_data_links_open_traceql_searches_in_tempo() -> None:
    """Every data link of the dashboard opens Grafana's Explore on Tempo with a TraceQL query."""
    panes = []
    for panel in load_json(DASHBOARD)["panels"]:
        for link in panel.get("fieldConfig", {}).get("defaults", {}).get("links", []):
            url = urllib.parse.urlsplit(link["url"])
            query = urllib.parse.parse_qs(url.query)
            assert (url.path, query["schemaVersion"], query["orgId"]) == ("/explore", ["1"], ["1"])
            (pane,) = json.loads(query["panes"][0]).values()
            panes.append(pane)
    assert len(panes) == 7
    for pane in panes:
        (target,) = pane["queries"]
        assert pane["datasource"] == target["datasource"]["uid"] == "tempo"
        assert pane["range"] == {"from": "${__from}", "to": "${__to}"}
        assert target["queryType"] == "traceql"
        assert target["query"].startswith("{ span.looptrace.path = ")


# -- against looptrace's Prometheus endpoint ------------------------------------------------


def serving(
    rank: int, world_size: int, port: int, job_rank: int = 0
) -> tuple[looptrace.Looptrace, FakeClock]:
    """Configure a looptrace of one rank serving Prometheus on `port`, on a fake clock.

    In the one-rank process group of `job_group` it serves the job's series if `job_rank` is 0.
    """
    clock = FakeClock()
    options: dict[str, Any] = {"prometheus": f"{LOCALHOST}:{port}"}
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        clock=clock,
        rank=looptrace.RankInfo(rank=rank, world_size=world_size),
        trace_every=0,
        job_rank=job_rank,
        **options,
    )
    return lt, clock


def get(url: str) -> bytes:
    """Return the body of a GET request."""
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body


def test_configs_read_only_names_and_labels_the_endpoint_serves(job_group: None) -> None:
    """Dashboard, rules and data sources use only served series and labels, and use them all."""
    from prometheus_client.parser import text_string_to_metric_families

    port = free_port()
    lt, clock = serving(1, 2, port)
    try:
        laps(lt, clock, 3, 0.01)
        lt.reset(across_ranks=True)
        lt.timer("train").record("data")  # a step open at the scrape: its age is served
        text = get(f"http://{LOCALHOST}:{port}/metrics").decode()
    finally:
        lt.shutdown()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    served = {s.name for s in samples if s.name.startswith("looptrace_")}
    served_labels = {label for s in samples if s.name in served for label in s.labels}
    usage, recorded = deploy_usage()
    assert {
        "unknown metrics": sorted(usage.metrics - served - recorded),
        "unknown labels": sorted(usage.labels - served_labels - TARGET_LABELS),
        "served but unused": sorted(served - usage.metrics),
    } == {"unknown metrics": [], "unknown labels": [], "served but unused": []}
    assert served == SERVED


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll `predicate` every 0.2 s until it holds or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.fixture
def two_ranks(
    tmp_path: Path, job_group: None
) -> Iterator[tuple[Prometheus, list[tuple[Any, FakeClock]]]]:
    """Two ranks serving their endpoints, and a real Prometheus scraping both."""
    binary = os.environ.get("LOOPTRACE_TEST_PROMETHEUS") or shutil.which("prometheus")
    if not binary:
        pytest.skip("no prometheus binary; .ci/run installs Debian's prometheus package")
    ports = [free_port(), free_port()]
    ranks = [serving(rank, 2, port, job_rank=rank) for rank, port in enumerate(ports)]
    server = None
    try:
        server = Prometheus(binary, ports, tmp_path)
        yield server, ranks
    finally:
        if server is not None:
            server.stop()
        for lt, _ in ranks:
            lt.shutdown()


def test_every_dashboard_query_and_rule_answers_from_a_real_prometheus(
    two_ranks: tuple[Prometheus, list[tuple[Any, FakeClock]]],
) -> None:
    """On deploy/'s scrape config and rules, every query returns data; rank 1 is the straggler."""
    server, ranks = two_ranks
    counts = f'{DURATION}_count{{looptrace_path="root.train"}}'
    for window in (1, 2):  # two windows, scraped apart, so that rates are positive
        for (lt, clock), data_s in zip(ranks, (0.01, 0.075), strict=True):
            laps(lt, clock, 10, data_s)
            lt.reset(across_ranks=True)

        def scraped(n: int = 10 * window) -> bool:
            return sorted(float(r["value"][1]) for r in server.query(counts)) == [n, n]

        assert wait_for(scraped, 30), server.log.read_text()[-2000:]
    for (lt, clock), open_s in zip(ranks, (1.0, 400.0), strict=True):
        lt.timer("train").record("data")  # rank 1's step hangs in data
        clock.advance(open_s)
    assert wait_for(lambda: len(server.query("looptrace_open_section_seconds")) == 2, 30)
    recorded = "looptrace:step_rank_slowdown:ratio"
    assert wait_for(
        lambda: len(server.query(f'{recorded}{{looptrace_path="root.train"}}')) == 2, 30
    )

    values = {"job": "looptrace", "step": "root.train", "__rate_interval": "1m", "__range": "1m"}
    dashboard, datasources = load_json(DASHBOARD), load_yaml(DATASOURCES)
    empty = [
        q.where
        for q in dashboard_queries(dashboard) + datasource_queries(datasources)
        if not server.query(grafana_expr(q.expr.replace('"x"', '"root.train.data"'), values))
    ]
    records = [r["record"] for g in load_yaml(RULES)["groups"] for r in g["rules"] if "record" in r]
    # the rules over rates answer once an evaluation saw two scrapes of both windows
    wait_for(lambda: all(server.query(record) for record in records), 30)
    recordings = [record for record in records if not server.query(record)]
    assert (empty, recordings) == ([], [])

    # The step timer variable offers exactly the outermost timer.
    (_, selector, label) = dashboard_variable_queries(dashboard)[1]
    paths = {r["metric"][label] for r in server.query(grafana_expr(selector, values))}
    step_regex = dashboard["templating"]["list"][1]["regex"].strip("/")
    assert sorted(p for p in paths if re.fullmatch(step_regex, p)) == ["root.train"]

    # Rank 1's step (0.13 s) against the median of 0.065 s and 0.13 s: 1.33, and it alerts.
    (straggler_panel,) = [q for q in dashboard_queries(dashboard) if "Stragglers" in q.where]
    slowest = server.query(grafana_expr(straggler_panel.expr, values))
    ratios = {r["metric"]["looptrace_rank"]: float(r["value"][1]) for r in slowest}
    assert ratios == {
        "1": pytest.approx(0.13 / 0.0975, rel=1e-6),
        "0": pytest.approx(0.065 / 0.0975, rel=1e-6),
    }
    (alert,) = [
        r
        for g in load_yaml(RULES)["groups"]
        for r in g["rules"]
        if r.get("alert") == "LooptraceStraggler"
    ]
    firing = {
        (r["metric"]["looptrace_rank"], r["metric"]["looptrace_path"])
        for r in server.query(alert["expr"])
    }
    assert ("1", "root.train") in firing and all(rank == "1" for rank, _ in firing)
    assert not any(math.isnan(v) for v in ratios.values())
    (hung,) = [
        r
        for g in load_yaml(RULES)["groups"]
        for r in g["rules"]
        if r.get("alert") == "LooptraceStepHung"
    ]
    hanging = {
        (r["metric"]["looptrace_rank"], r["metric"]["looptrace_timer"])
        for r in server.query(hung["expr"])
    }
    assert hanging == {("1", "root.train")}


def test_histogram_panels_show_exemplars_that_open_tempo() -> None:
    """Every bucket query asks for exemplars; their trace_id label links to the Tempo source."""
    dashboard, datasources = load_json(DASHBOARD), load_yaml(DATASOURCES)
    bucket_targets = [
        (panel["title"], target.get("exemplar"))
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if f"{DURATION}_bucket" in target.get("expr", "")
    ]
    assert len(bucket_targets) == 1  # the detail ranks' drill-down; the job's have none
    assert [title for title, exemplar in bucket_targets if exemplar is not True] == []
    (prometheus,) = [s for s in datasources["datasources"] if s["type"] == "prometheus"]
    (tempo,) = [s for s in datasources["datasources"] if s["type"] == "tempo"]
    destinations = prometheus["jsonData"]["exemplarTraceIdDestinations"]
    emitted = TraceExemplar(trace_id=1, span_id=2, value=0.1, time_ns=0).labels
    assert [(d["name"], d["datasourceUid"]) for d in destinations] == [("trace_id", tempo["uid"])]
    assert sorted(emitted) == ["span_id", "trace_id"]
