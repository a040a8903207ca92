"""The settings table: the docs, the resolvers and `looptrace replay` all follow it."""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import looptrace
from looptrace._export.otlp_settings import otlp_settings
from looptrace._export.settings import (
    BatchSettings,
    ExportOptions,
    PrometheusSettings,
    resolve,
)
from looptrace._export.settings_table import (
    DEFAULT_ENDPOINTS,
    SETTINGS,
    docs_rows,
    env_value,
    int_value,
    option_help,
    setting,
    str_value,
)
from looptrace._offline import replay as _replay
from looptrace._offline.commands import add_commands

CONFIGURATION = Path(__file__).parent.parent / "docs" / "configuration.md"
BATCH = (
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_EXPORT_TIMEOUT",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
)


def docs_table() -> list[str]:
    """Return the Configuration page's settings table: from its header to the first non-row."""
    lines = CONFIGURATION.read_text().splitlines()
    start = lines.index(docs_rows()[0])
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def test_docs_table_is_the_rendered_table() -> None:
    """The Configuration page's settings table is exactly the table rendered (`docs_rows()`)."""
    assert docs_table() == docs_rows()


def test_every_configure_argument_of_the_table_exists() -> None:
    """Each argument the table names is an exporter option or a `configure()` parameter."""
    parameters = set(inspect.signature(looptrace.configure).parameters)
    assert {s.argument for s in SETTINGS if s.argument} - parameters == set()


def test_resolved_defaults_are_the_tables() -> None:
    """With nothing set, the resolvers use the table's defaults (batch, Prometheus, OTLP)."""
    settings = resolve(
        ExportOptions(traces_exporter="otlp", prometheus=True),
        {},
        owns_traces=True,
        owns_metrics=True,
    )
    expected_batch = BatchSettings(*(int_value(name) for name in BATCH))
    assert (settings.batch, settings.prometheus) == (
        expected_batch,
        PrometheusSettings(
            host=str_value("OTEL_EXPORTER_PROMETHEUS_HOST"),
            port=int_value("OTEL_EXPORTER_PROMETHEUS_PORT"),
            source="OTEL_EXPORTER_PROMETHEUS_PORT",
        ),
    )
    assert settings.traces is not None
    assert (
        settings.traces.protocol,
        settings.traces.endpoint,
        settings.traces.timeout_s,
        settings.traces.compression,
    ) == (
        setting("OTEL_EXPORTER_OTLP_PROTOCOL").value,
        f"{DEFAULT_ENDPOINTS['http/protobuf']}/v1/traces",
        setting("OTEL_EXPORTER_OTLP_TIMEOUT").value,
        None,
    )
    grpc = otlp_settings("metrics", ExportOptions(otlp_protocol="grpc"), {})
    assert grpc.endpoint == DEFAULT_ENDPOINTS["grpc"].removeprefix("http://")


@pytest.mark.parametrize("name", BATCH)
def test_batch_bounds_are_the_tables(name: str) -> None:
    """Each OTEL_BSP_* value is accepted at the table's bounds and refused just past them."""
    entry = setting(name)
    assert entry.low is not None and entry.high is not None
    others = {  # the batch may not exceed the queue
        "OTEL_BSP_MAX_QUEUE_SIZE": {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1"},
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": {"OTEL_BSP_MAX_QUEUE_SIZE": str(entry.high)},
    }.get(name, {})
    for value in (entry.low, entry.high):
        environ = {"OTEL_TRACES_EXPORTER": "console", **others, name: str(value)}
        resolved = resolve(ExportOptions(), environ, owns_traces=True, owns_metrics=False)
        assert value in vars(resolved.batch).values()
    for value in (entry.low - 1, entry.high + 1):
        environ = {"OTEL_TRACES_EXPORTER": "console", name: str(value)}
        with pytest.raises(
            looptrace.ConfigError,
            match=f"{name}: expected a whole number from {entry.low} to {entry.high}, ",
        ):
            resolve(ExportOptions(), environ, owns_traces=True, owns_metrics=False)


def test_timeout_bound_is_the_tables() -> None:
    """`otlp_timeout` and `--timeout` accept the table's highest value and refuse more."""
    high = setting("OTEL_EXPORTER_OTLP_TIMEOUT").high
    assert high is not None
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:1"}
    assert _replay.replay_settings(None, None, [], high, endpoint).timeout_s == high
    with pytest.raises(looptrace.ConfigError, match=f"--timeout: .* <= {high:g} "):
        _replay.replay_settings(None, None, [], high * 2, endpoint)


def test_replay_options_come_from_the_table() -> None:
    """`looptrace replay` has one option per setting the table gives one, with its help.

    Its one option of its own, `--max-request-bytes`, sets no export of `configure()`.
    """
    commands = argparse.ArgumentParser().add_subparsers()
    add_commands(commands)
    replay = commands.choices["replay"]
    options = {
        a.option_strings[0]: (a.help, a.choices and tuple(a.choices))
        for a in replay._actions
        if a.option_strings and a.option_strings[0] not in {"-h", "--max-request-bytes"}
    }
    assert options == {
        s.option: (option_help(s.name), s.choices or None) for s in SETTINGS if s.option
    }


def test_replay_defaults_are_the_tables() -> None:
    """Given only an endpoint, replay uses the table's protocol and timeout defaults."""
    replayed = _replay.replay_settings(
        None, None, [], None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:1"}
    )
    assert (replayed.protocol, replayed.timeout_s, replayed.compression) == (
        setting("OTEL_EXPORTER_OTLP_PROTOCOL").value,
        setting("OTEL_EXPORTER_OTLP_TIMEOUT").value,
        None,
    )


def test_service_name_default_is_the_tables() -> None:
    """With neither argument nor variable, `configure()` names the service as the table says."""
    code = (
        "from opentelemetry import trace; import looptrace; looptrace.configure(); "
        "print(trace.get_tracer_provider().resource.attributes['service.name'])"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=environ,
        timeout=60,
    )
    assert result.stdout.strip() == str_value("OTEL_SERVICE_NAME")


PACKAGE = Path(looptrace.__file__).parent
# Modules that hand the process environment to a reader: the table's resolvers and the CLI,
# the launcher's rank variables (`_distributed/ranks.py`, a table of launchers of its own),
# the NVTX tool's attach variable (`_core/ranges.py`) and the choice of core (`_core/build.py`).
ENVIRONMENT_READERS = {
    "_export/run_settings.py",
    "_export/settings.py",
    "_offline/replay.py",
    "_offline/commands.py",
    "_distributed/ranks.py",
    "_core/ranges.py",
    "_core/build.py",
    "_offline/run.py",  # `looptrace run`: the program's environment
    "integrations/auto.py",  # instrumenting from the environment
    "_autoinstrument/sitecustomize.py",  # whether to instrument at interpreter start
}
# Read by `import looptrace` before any setting, below the layer of the table: which core loads
# (`_core/build.py`; setup.py reads it at installation too).
OUTSIDE_THE_TABLE = {"LOOPTRACE_PURE_PYTHON"}


def test_every_variable_the_package_names_is_the_tables() -> None:
    """Each OTEL_*/LOOPTRACE_* name in the package is a table row (or a per-signal form of one)."""
    unknown = []
    for module in sorted(PACKAGE.rglob("*.py")):
        for name in (
            set(re.findall(r"\b(?:OTEL|LOOPTRACE)_[A-Z0-9_]*[A-Z0-9]\b", module.read_text()))
            - OUTSIDE_THE_TABLE
        ):
            try:
                env_value(name, {})
            except KeyError:
                unknown.append(f"{module.relative_to(PACKAGE)}: {name}")
    assert unknown == []


def test_the_table_reads_only_its_own_variables() -> None:
    """`env_value()` reads the table's names and their per-signal forms, and refuses others."""
    environ = {"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "3", "OTEL_SERVICE_NAME": "s"}
    assert env_value("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", environ) == "3"
    assert env_value("OTEL_SERVICE_NAME", environ) == "s"
    assert env_value("OTEL_SDK_DISABLED", environ) == ""
    for name in ("OTEL_TRACES_SERVICE_NAME", "OTEL_EXPORTER_PROMETHEUS_TRACES_PORT", "HOME"):
        with pytest.raises(KeyError, match=f"{name} is not a variable of the settings table"):
            env_value(name, environ)


def test_only_the_settings_resolvers_take_the_environment() -> None:
    """No module outside the known readers touches `os.environ` or `getenv`."""
    readers = {
        str(module.relative_to(PACKAGE))
        for module in PACKAGE.rglob("*.py")
        if re.search(r"os\.environ|getenv", module.read_text())
    }
    assert readers - ENVIRONMENT_READERS == set()
