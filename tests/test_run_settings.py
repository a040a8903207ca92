"""configure()'s own settings: arguments over the table's variables, then the table's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

import looptrace
from looptrace._base.errors import ConfigError
from looptrace._distributed.job_histograms import Scale
from looptrace._export.run_settings import RunSettings, resolve_run, scale
from looptrace._export.settings_table import str_value
from looptrace.testing import FakeClock

NONE_PASSED = {
    "service_name": None,
    "trace_every": None,
    "trace_first": None,
    "run_id": None,
    "trace_file": None,
    "snapshot_file": None,
}


def _resolved(environ: dict[str, str], **arguments: object) -> RunSettings:
    return resolve_run(**{**NONE_PASSED, **arguments}, environ=environ)  # type: ignore[arg-type]


def test_variables_fill_what_the_arguments_leave_out() -> None:
    """Each setting comes from its variable when its argument is not passed."""
    settings = _resolved(
        {
            "OTEL_SERVICE_NAME": "from-env",
            "OTEL_SDK_DISABLED": " TRUE ",
            "LOOPTRACE_RUN_ID": "run-7",
            "LOOPTRACE_TRACE_FILE": "spans.jsonl",
            "LOOPTRACE_SNAPSHOT_FILE": "snapshots.jsonl",
        }
    )
    assert (
        settings.service_name,
        settings.disabled,
        settings.run_id,
        settings.trace_file,
        settings.snapshot_file,
    ) == ("from-env", True, "run-7", "spans.jsonl", "snapshots.jsonl")


def test_arguments_win_over_the_variables() -> None:
    """A passed argument is used whatever its variable says."""
    settings = _resolved(
        {
            "OTEL_SERVICE_NAME": "from-env",
            "LOOPTRACE_RUN_ID": "env-run",
            "LOOPTRACE_TRACE_FILE": "env.jsonl",
            "LOOPTRACE_SNAPSHOT_FILE": "env-s.jsonl",
        },
        service_name="passed",
        run_id="passed-run",
        trace_file=Path("t.jsonl"),
        snapshot_file="s.jsonl",
    )
    assert (settings.service_name, settings.run_id, settings.trace_file) == (
        "passed",
        "passed-run",
        Path("t.jsonl"),
    )
    assert settings.snapshot_file == "s.jsonl"


def test_nothing_set_gives_the_tables_defaults() -> None:
    """Without arguments or variables: the table's service name, tracing on, no run id or files."""
    settings = _resolved({"OTEL_SDK_DISABLED": "false", "LOOPTRACE_RUN_ID": ""})
    assert (
        settings.service_name,
        settings.disabled,
        settings.run_id,
        settings.trace_file,
        settings.snapshot_file,
    ) == (str_value("OTEL_SERVICE_NAME"), False, None, None, None)


def _traced_steps(steps: int, **arguments: int) -> list[int]:
    """Run `steps` outermost laps of 1 s under configure() and return the traced ones."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON)  # the SDK's own sampler would read the variable
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=provider, clock=clock, **arguments)  # type: ignore[arg-type]
    origin = clock.time_ns()
    step = lt.timer("step")
    for _ in range(steps):
        step.record()
        clock.advance(1)
        step.stop()
    lt.shutdown()
    return sorted(
        round(((s.start_time or 0) - origin) / 1e9) for s in exporter.get_finished_spans()
    )


@pytest.mark.parametrize(
    ("sampler", "argument", "traced"),
    [
        ("always_on", None, [0, 1, 2, 3, 4, 5]),
        ("always_off", None, []),
        ("parentbased_traceidratio", "0.5", [0, 2, 4]),
    ],
)
def test_configure_samples_steps_as_the_sampler_variable_says(
    monkeypatch: pytest.MonkeyPatch, sampler: str, argument: str | None, traced: list[int]
) -> None:
    """OTEL_TRACES_SAMPLER[_ARG], read by configure() through the table, picks the steps."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    if argument is not None:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", argument)
    assert _traced_steps(6) == traced


def test_trace_every_wins_over_the_sampler_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """configure(trace_every=3) traces steps 0 and 3 even with OTEL_TRACES_SAMPLER=always_off."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    assert _traced_steps(6, trace_every=3) == [0, 3]


def test_a_bad_sampler_variable_fails_configure(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown OTEL_TRACES_SAMPLER is a ConfigError from configure() naming the variable."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "jaeger_remote")
    with pytest.raises(looptrace.ConfigError, match="OTEL_TRACES_SAMPLER='jaeger_remote'"):
        looptrace.configure(tracer_provider=TracerProvider(), clock=FakeClock())


def test_detail_ranks_and_job_rank_come_from_arguments_variables_or_the_table() -> None:
    """`detail_ranks` and `job_rank`: argument over variable over the table's 8 and 0."""
    assert scale(None, None, 16, {}) == Scale(detail_ranks=8, job_rank=0)
    environ = {"LOOPTRACE_DETAIL_RANKS": " ALL ", "LOOPTRACE_JOB_RANK": "3"}
    assert scale(None, None, 16, environ) == Scale(detail_ranks="all", job_rank=3)
    assert scale(2, 5, 16, environ) == Scale(detail_ranks=2, job_rank=5)
    assert scale("all", 0, 1, {}) == Scale(detail_ranks="all", job_rank=0)


@pytest.mark.parametrize(
    ("detail_ranks", "job_rank", "environ", "message"),
    [
        (-1, None, {}, "detail_ranks: expected a whole number or 'all', got -1"),
        ("some", None, {}, "detail_ranks: expected a whole number or 'all', got 'some'"),
        (True, None, {}, "detail_ranks: expected a whole number or 'all', got True"),
        (
            None,
            None,
            {"LOOPTRACE_DETAIL_RANKS": "8.5"},
            "LOOPTRACE_DETAIL_RANKS: expected a whole number from 0 to 1000000, got '8.5'",
        ),
        (None, 4, {}, "job_rank: rank 4 is not in a job of 4 ranks"),
        (None, None, {"LOOPTRACE_JOB_RANK": "9"}, "LOOPTRACE_JOB_RANK: rank 9 is not in a job"),
    ],
)
def test_bad_detail_ranks_or_job_rank_fail_configure_naming_the_setting(
    detail_ranks: object, job_rank: object, environ: dict[str, str], message: str
) -> None:
    """A value that is not a whole number in range, or a rank the job lacks, is refused."""
    with pytest.raises(ConfigError) as error:
        scale(detail_ranks, job_rank, 4, environ)
    assert str(error.value).startswith(message)


def test_configure_refuses_a_job_rank_outside_the_job() -> None:
    """configure() checks job_rank against the world size before it sets anything up."""
    with pytest.raises(ConfigError, match="job_rank: rank 2 is not in a job of 2 ranks"):
        looptrace.configure(rank=looptrace.RankInfo(rank=0, world_size=2), job_rank=2)
