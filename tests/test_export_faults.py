"""Training goes on when the collector is down, restarting, stalled, or refusing the client."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import looptrace
from looptrace.testing import FakeClock

from .otlp_server import OtlpReceiver, StalledServer, Tls, free_port

PROTOCOLS = ["grpc", "http/protobuf"]


class _Discard(SpanExporter):
    """Accepts every batch and keeps nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Drop the batch."""
        return SpanExportResult.SUCCESS


@pytest.fixture
def fast_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Export span batches every 50 ms instead of every 5 s."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def laps(lt: looptrace.Looptrace, clock: FakeClock, steps: int) -> int:
    """Run `steps` laps of `train` with one `data` section each; return the span count."""
    train = lt.timer("train")
    for _ in range(steps):
        train.record("data")
        clock.advance(0.01)
        train.record()
    train.stop()
    return 2 * steps + 1


DOWN_PROGRAM = """
    import json, sys
    import looptrace
    from looptrace.testing import FakeClock

    def peak_rss_mb():  # the high-water mark: immune to how full the queue is when sampled
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024

    clock = FakeClock()
    lt = looptrace.configure(
        clock=clock,
        otlp_endpoint=sys.argv[1],
        otlp_protocol=sys.argv[2],
        otlp_timeout=1.0,
        trace_every=1,
    )
    train = lt.timer("train")
    sections = 0
    for step in range(15_000 + 33_334):
        train.record("data"); clock.advance(0.001)
        train.record("forward"); clock.advance(0.002)
        train.record()
        sections += 3
        if step % 500 == 499:
            lt.reset()
        if step == 15_000 - 1:  # 45,000 sections in: queues full, allocator warm
            warm, sections = peak_rss_mb(), 0
    train.stop()
    end = peak_rss_mb()
    lt.shutdown()
    print(json.dumps({"sections_after_warmup": sections, "growth_mb": end - warm,
                      "dropped": lt.health().dropped_spans}))
"""


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_collector_down_for_the_whole_run(protocol: str) -> None:
    """No collector: no exception, <= 20 MB more over 10^5 sections, every span counted lost."""
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DOWN_PROGRAM), endpoint, protocol],
        capture_output=True,
        check=False,
        text=True,
        timeout=300,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout)
    print(f"collector down ({protocol}): {figures}")
    assert figures["sections_after_warmup"] == 100_002
    assert figures["growth_mb"] <= 20
    assert figures["dropped"] == 3 * 48_334 + 1  # every span, plus the last lap of train


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_collector_restart_mid_run_delivers_what_comes_after(
    protocol: str, fast_batches: None
) -> None:
    """Spans made after the collector is back arrive (>= 99 %); the rest are counted lost."""
    receiver = OtlpReceiver(protocol, port=free_port())
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        trace_every=1,
        clock=clock,
        otlp_endpoint=receiver.endpoint,
        otlp_protocol=protocol,
        otlp_timeout=1.0,
        metrics_exporter="none",
    )
    train = lt.timer("train")
    for _ in range(300):  # collector down
        train.record("data")
        clock.advance(0.01)
        train.record()
    time.sleep(0.2)  # the exporter is now failing and retrying
    with receiver:
        for _ in range(700):  # collector back
            train.record("data")
            clock.advance(0.01)
            train.record()
        train.stop()
        after = 2 * 700 + 1  # laps 300..999 with their data sections, plus the last lap
        receiver.wait_for_spans(after, timeout=15)
        lt.shutdown()
    delivered = sum(1 for s in receiver.spans if s["attributes"]["looptrace.step"] >= 300)
    print(f"collector restart ({protocol}): {delivered}/{after} delivered after the restart")
    assert delivered >= 0.99 * after
    assert lt.health().dropped_spans == 2 * 1000 + 1 - len(receiver.spans)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stalled_collector_costs_the_training_thread_little(protocol: str) -> None:
    """A collector that never answers: per-section cost <= 1.5x no exporter; bounded shutdown."""
    stalled = StalledServer()
    try:
        # Spans are built only when something reads them: the reference exports to nowhere.
        reference = TracerProvider()
        reference.add_span_processor(BatchSpanProcessor(_Discard()))
        base = looptrace.configure(tracer_provider=reference, trace_every=1)
        stuck = looptrace.configure(
            tracer_provider=TracerProvider(),
            trace_every=1,
            otlp_endpoint=stalled.endpoint,
            otlp_protocol=protocol,
            otlp_timeout=1.0,
        )

        def cost(lt: looptrace.Looptrace, steps: int = 2000) -> float:
            train = lt.timer("train")
            start = time.perf_counter_ns()
            for step in range(steps):
                train.record("data")
                train.record("forward")
                train.record()
                if step % 500 == 499:
                    lt.reset()
            train.stop()
            return (time.perf_counter_ns() - start) / (3 * steps)

        cost(base), cost(stuck)  # warm up; fills the stalled exporter's queue
        base_costs, stuck_costs = [], []
        for _ in range(7):
            base_costs.append(cost(base))
            stuck_costs.append(cost(stuck))
        ratio = min(stuck_costs) / min(base_costs)
        started = time.monotonic()
        stuck.shutdown()
        shutdown_s = time.monotonic() - started
        base.shutdown()
    finally:
        stalled.close()
    print(f"stalled collector ({protocol}): cost ratio {ratio:.2f}, shutdown {shutdown_s:.2f} s")
    assert ratio <= 1.5
    assert shutdown_s <= 1.0 + 0.5  # the OTLP timeout, plus scheduling slack
    assert stuck.health().dropped_spans == 8 * (3 * 2000 + 1)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    """Make a self-signed certificate for 127.0.0.1 for this test module."""
    return Tls.generate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_receiver(tls: Tls) -> Iterator[OtlpReceiver]:
    """Yield a gRPC receiver that only speaks TLS."""
    with OtlpReceiver("grpc", tls=tls) as rx:
        yield rx


def test_grpc_over_tls_with_a_self_signed_certificate(tls: Tls, tls_receiver: OtlpReceiver) -> None:
    """OTLP/gRPC to a TLS receiver works when its CA is given as otlp_certificate."""
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        trace_every=1,
        clock=clock,
        otlp_endpoint=tls_receiver.endpoint,
        otlp_protocol="grpc",
        otlp_certificate=str(tls.cert),
    )
    spans = laps(lt, clock, 5)
    lt.shutdown()
    assert (len(tls_receiver.spans), lt.health().dropped_spans) == (spans, 0)
    assert tls_receiver.wait_for_metrics(
        lambda m: m["looptrace.section.duration"]["root.train.data"]["count"] == 5
    )


def test_plaintext_to_a_tls_receiver_fails_cleanly(
    tls_receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Plaintext gRPC to a TLS-only receiver: nothing raises, the lost spans are counted."""
    clock = FakeClock()
    lt = looptrace.configure(
        tracer_provider=TracerProvider(),
        trace_every=1,
        clock=clock,
        otlp_endpoint=f"http://127.0.0.1:{tls_receiver.port}",
        otlp_protocol="grpc",
        otlp_timeout=1.0,
    )
    spans = laps(lt, clock, 5)
    lt.shutdown()
    assert (tls_receiver.spans, lt.health().dropped_spans) == ([], spans)
    assert [r.getMessage() for r in caplog.records if r.name == "looptrace"] == [
        f"looptrace: {spans} span(s) could not be exported; training goes on and further "
        "losses are counted in lt.health().dropped_spans, not logged"
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_header_values_are_never_logged(
    protocol: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A rejected token is reported as lost spans; its value appears in no log or output."""
    secret = "s3cr3t-token-value"
    caplog.set_level(logging.DEBUG)
    with OtlpReceiver(protocol, require=("authorization", "Bearer right")) as rx:
        clock = FakeClock()
        lt = looptrace.configure(
            tracer_provider=TracerProvider(),
            trace_every=1,
            clock=clock,
            otlp_endpoint=rx.endpoint,
            otlp_protocol=protocol,
            otlp_headers={"authorization": f"Bearer {secret}"},
            otlp_timeout=1.0,
        )
        spans = laps(lt, clock, 3)
        lt.shutdown()
    assert rx.rejected >= 1
    assert (rx.spans, lt.health().dropped_spans) == ([], spans)
    out, err = capfd.readouterr()
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert secret not in logged + out + err + repr(lt) + repr(lt._outputs)
    assert any(r.name == "looptrace" and r.levelno == logging.WARNING for r in caplog.records)


def test_certificate_file_is_checked_at_configure(tmp_path: Path) -> None:
    """A missing CA file is a ConfigError naming the setting, not a later export failure."""
    with pytest.raises(looptrace.ConfigError, match="otlp_certificate: no such file"):
        looptrace.configure(
            tracer_provider=TracerProvider(),
            trace_every=1,
            otlp_endpoint="https://127.0.0.1:4317",
            otlp_protocol="grpc",
            otlp_certificate=str(tmp_path / "missing.pem"),
        )
