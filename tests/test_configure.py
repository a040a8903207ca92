"""configure(): providers, resource, service name, and bad arguments."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import looptrace
from looptrace.testing import FakeClock

from .helpers.processes import bare_env


def _run(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        env=bare_env(env),
        timeout=60,
    )
    return result.stdout.strip()


def test_adds_processor_to_the_applications_global_provider() -> None:
    """With a global SDK provider already set, looptrace adds to it and never replaces it."""
    out = _run(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        app = TracerProvider()
        trace.set_tracer_provider(app)
        import looptrace
        lt = looptrace.configure()
        assert trace.get_tracer_provider() is app
        procs = app._active_span_processor._span_processors
        print([type(p).__name__ for p in procs])
        """
    )
    assert out == "['AggregatingSpanProcessor']"


def test_installs_its_own_provider_without_an_sdk() -> None:
    """With no SDK configured, looptrace installs an SDK provider with its resource."""
    out = _run(
        """
        from opentelemetry import trace
        import looptrace
        lt = looptrace.configure("weathergen")
        provider = trace.get_tracer_provider()
        attrs = provider.resource.attributes
        print(type(provider).__name__, attrs["service.name"], attrs["looptrace.rank"],
              attrs["looptrace.world_size"], attrs["looptrace.launcher"])
        """,
        RANK="2",
        WORLD_SIZE="4",
        TORCHELASTIC_RUN_ID="abc",
    )
    assert out == "TracerProvider weathergen 2 4 torchrun"


def test_service_name_falls_back_to_env_then_default() -> None:
    """service.name comes from the argument, else OTEL_SERVICE_NAME, else "looptrace"."""
    code = """
        from opentelemetry import trace
        import looptrace
        looptrace.configure()
        print(trace.get_tracer_provider().resource.attributes["service.name"])
        """
    assert _run(code, OTEL_SERVICE_NAME="from-env") == "from-env"
    assert _run(code) == "looptrace"


def test_sdk_disabled_creates_no_spans_but_aggregates() -> None:
    """OTEL_SDK_DISABLED=true turns tracing off; statistics still work."""
    out = _run(
        """
        import looptrace
        from looptrace.testing import FakeClock
        clock = FakeClock()
        lt = looptrace.configure(clock=clock)
        t = lt.timer("t"); t.record(); clock.advance(1); t.stop()
        print(lt._engine.tracer, lt.reset()["root.t"].total)
        """,
        OTEL_SDK_DISABLED="true",
    )
    assert out == "None 1.0"


def test_explicit_tracer_provider_receives_the_spans() -> None:
    """A tracer_provider passed in gets looptrace's spans and the aggregating processor."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    clock = FakeClock()
    lt = looptrace.configure(tracer_provider=provider, clock=clock)
    lt.timer("t").record()
    clock.advance(1)
    lt.timer("t").stop()
    assert [s.name for s in exporter.get_finished_spans()] == ["t"]
    lt.shutdown()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trace_every": -1}, "trace_every must be an int >= 0, got -1"),
        ({"trace_every": 1.5}, "trace_every must be an int >= 0, got 1.5"),
        ({"max_paths": 0}, "max_paths must be at least 1 and at most 1000000, got 0"),
        ({"max_paths": 10**9}, "max_paths must be at least 1 and at most 1000000, got 1000000000"),
        ({"max_paths": "5"}, "max_paths must be at least 1 and at most 1000000, got '5'"),
        ({"rank": 0}, r"rank must be a looptrace.RankInfo \(RankInfo\(rank=3, world_size=8\)\), "),
        ({"rank": "3"}, "or None to read it from the launcher's environment; got str '3'"),
    ],
)
def test_bad_arguments_name_the_setting(kwargs: dict[str, object], message: str) -> None:
    """Bad configuration raises at configure() with the setting named."""
    with pytest.raises(looptrace.ConfigError, match=message):
        looptrace.configure(tracer_provider=TracerProvider(), **kwargs)  # type: ignore[arg-type]


def test_wall_clock_jump_does_not_change_durations() -> None:
    """Durations come from the monotonic clock; a wall-clock jump moves neither them nor spans."""

    class JumpingClock(FakeClock):
        def time_ns(self) -> int:
            return super().time_ns() + self.jump

        jump = 0

    clock = JumpingClock()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    lt = looptrace.configure(tracer_provider=provider, clock=clock)
    train = lt.timer("t")
    train.record()
    clock.jump = -3_600_000_000_000  # the wall clock steps back an hour mid-run
    clock.advance(2.0)
    train.stop()
    (span,) = exporter.get_finished_spans()
    assert span.end_time is not None and span.start_time is not None
    assert span.end_time - span.start_time == 2_000_000_000
    assert lt.reset()["root.t"].total == 2.0


def test_run_id_precedence_argument_env_then_launcher() -> None:
    """run_id= wins over LOOPTRACE_RUN_ID, which wins over the launcher's job id."""
    code = """
        import looptrace
        from opentelemetry.sdk.trace import TracerProvider
        def run(**kw):
            provider = TracerProvider(id_generator=looptrace.StepIdGenerator())
            lt = looptrace.configure(tracer_provider=provider, **kw)
            return lt._engine.step_traces.run_id
        print(run(run_id="explicit"), run())
        """
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "3"}
    assert _run(code, LOOPTRACE_RUN_ID="from-env", **env) == "explicit from-env"
    assert _run(code, **env) == "explicit 9.3"


def test_user_provider_without_step_ids_gets_ordinary_ids() -> None:
    """A provider without StepIdGenerator cannot pin rank 0's ids, so none are derived."""
    lt = looptrace.configure(tracer_provider=TracerProvider(), run_id="r", clock=FakeClock())
    assert lt._engine.step_traces is None
    lt.shutdown()


TWICE = """
import json, sys
import looptrace

first = looptrace.configure("first", trace_file=sys.argv[1], trace_every=1)
first.timer("a").record(); first.timer("a").stop()
if sys.argv[3] == "shutdown":
    first.shutdown()
second = looptrace.configure("second", trace_file=sys.argv[2], trace_every=1)
second.timer("b").record(); second.timer("b").stop()
second.shutdown()
first.shutdown()
"""


@pytest.mark.parametrize("between", ["shutdown", "none"])
def test_a_second_configure_is_separate_from_the_first(tmp_path: Path, between: str) -> None:
    """configure() twice (or after shutdown()): each instance has its own resource and file."""
    files = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]
    subprocess.run(
        [sys.executable, "-c", TWICE, *map(str, files), between],
        check=True,
        capture_output=True,
        timeout=60,
    )

    def spans(path: Path) -> list[tuple[str, str]]:
        return [
            (
                next(
                    a["value"]["stringValue"]
                    for a in resource["resource"]["attributes"]
                    if a["key"] == "service.name"
                ),
                span["name"],
            )
            for line in path.read_text().splitlines()
            for resource in json.loads(line)["resourceSpans"]
            for scope in resource["scopeSpans"]
            for span in scope["spans"]
        ]

    assert [spans(path) for path in files] == [[("first", "a")], [("second", "b")]]
