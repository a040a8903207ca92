"""GPU check for device timers: one command, under three minutes, on a CUDA machine.

    python benchmarks/gpu_check.py

Queues ~50 ms of matrix multiplications per step and times them twice in one loop: in a
device section (CUDA events, resolved lazily) and in a host section without a synchronize.
The device section must report >= 45 ms; the host one only the launches, a small fraction.
It also prints the per-section cost of a device section's timer calls, checks each window's
device memory (`Snapshot.memory`) against `torch.cuda.max_memory_allocated()` and the peak
reset between windows (a 1 GiB tensor held in the first window only), that a traced lap's
span carries its window's device peak so far, that the NVML sampler (`sample_system`, with
nvidia-ml-py) sees the busy device's utilisation, memory, temperature and power, and exits
non-zero when a check fails.
"""

from __future__ import annotations

import sys
import time

import torch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import looptrace


def _matmuls_for(seconds: float, a: torch.Tensor, b: torch.Tensor) -> int:
    """Return how many a @ b take about `seconds` on this device."""
    for _ in range(3):
        _ = a @ b  # warm up kernels and clocks
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        _ = a @ b
    torch.cuda.synchronize()
    each = (time.perf_counter() - start) / 20
    return max(1, round(seconds / each))


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    a = torch.randn(4096, 4096, device=device)
    b = torch.randn(4096, 4096, device=device)
    n = _matmuls_for(0.050, a, b)
    print(f"device: {torch.cuda.get_device_name()}; {n} matmuls of 4096^2 ~ 50 ms")

    lt = looptrace.configure("gpu-check", trace_every=0, rank=looptrace.RankInfo())
    step = lt.timer("step")
    step.timer("on_device", device=True)
    step.timer("other_device", device=True)
    for _ in range(10):
        step.record("on_device")  # events around the queued kernels
        for _ in range(n):
            _ = a @ b
        step.record("on_host")  # host clock, no synchronize: sees the launches only
        for _ in range(n):
            _ = a @ b
        step.record()
    step.stop()
    snap = lt.reset()
    on_device = snap["root.step.on_device"].mean * 1e3
    on_host = snap["root.step.on_host"].mean * 1e3
    print(f"device section mean: {on_device:.1f} ms (want >= 45)")
    print(f"host section mean (no sync): {on_host:.2f} ms (launch time only)")

    torch.cuda.synchronize()
    sections = 20_000
    start = time.perf_counter_ns()
    for i in range(sections):
        step.record("on_device" if i % 2 else "other_device")
    step.stop()
    hot = (time.perf_counter_ns() - start) / sections / 1e3
    lt.reset()
    print(f"timer cost per device section (no work, events only): {hot:.2f} µs")
    memory_ok = _memory_check(lt)
    lt.shutdown()
    memory_ok = _lap_memory_check() and memory_ok
    nvml_ok = _nvml_check(a, b, n)

    ok = on_device >= 45.0 and on_host < 0.5 * on_device and memory_ok and nvml_ok
    print("gpu_check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def _memory_check(lt: looptrace.Looptrace) -> bool:
    """Check two windows' device peaks: a 1 GiB tensor held in the first one only."""
    gib = 1 << 30
    lt.reset()
    big = torch.empty(gib, dtype=torch.uint8, device="cuda")
    expected = torch.cuda.max_memory_allocated()  # what torch says the window's peak is
    del big
    first = lt.reset().memory
    second = lt.reset().memory
    if first is None or second is None or first.device_peak_allocated is None:
        print("device memory: not read (is another tool resetting the peak?)")
        return False
    assert second.device_peak_allocated is not None
    print(
        f"device memory: window with 1 GiB peak allocated {first.device_peak_allocated / gib:.3f}"
        f" GiB (torch says {expected / gib:.3f}), reserved "
        f"{(first.device_peak_reserved or 0) / gib:.3f} GiB; next window "
        f"{second.device_peak_allocated / gib:.3f} GiB; retries {first.device_alloc_retries}, "
        f"OOMs {first.device_ooms}; host resident {(first.host_rss or 0) / gib:.2f} GiB"
    )
    return (
        first.device_peak_allocated == expected
        and first.device_peak_allocated >= gib
        and second.device_peak_allocated < first.device_peak_allocated - gib // 2
    )


def _lap_memory_check() -> bool:
    """Check that a traced lap's span has the device peak so far: 1 GiB held during lap 0."""
    gib = 1 << 30
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    lt = looptrace.configure(
        "gpu-check-laps",
        tracer_provider=provider,
        trace_every=1,
        rank=looptrace.RankInfo(),
        device_memory=True,
    )
    step = lt.timer("step")
    lt.reset()  # the window's peak starts from what is held now
    step.record()
    big = torch.empty(gib, dtype=torch.uint8, device="cuda")
    expected = torch.cuda.max_memory_allocated()
    del big
    step.record()  # lap 0 ends: its span reads the peak so far
    step.stop()
    lt.shutdown()
    laps = [dict(s.attributes or {}) for s in spans.get_finished_spans() if s.name == "step"]
    got = laps[0].get("looptrace.memory.device_peak_allocated") if laps else None
    host = laps[0].get("looptrace.memory.host_peak_rss") if laps else None
    print(
        f"traced lap memory: device peak allocated {got} B (torch says {expected} B), "
        f"host peak resident {host} B"
    )
    return got == expected and isinstance(host, int)


def _nvml_check(a: torch.Tensor, b: torch.Tensor, n: int) -> bool:
    """Check NVML's figures of the current device over ~2 s of matmuls (skipped without it)."""
    from looptrace.integrations.system import NvmlSource, SystemSampler

    try:
        source = NvmlSource()
    except ImportError:
        print("nvml: skipped (pip install 'looptrace[gpu]' for nvidia-ml-py)")
        return True
    lt = looptrace.configure("gpu-check-nvml", trace_every=0, rank=looptrace.RankInfo())
    sampler = SystemSampler(lt, [source], interval_s=0.2).start()
    lt.reset()
    held = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # at least 1 GiB in use
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        for _ in range(n):
            _ = a @ b
        torch.cuda.synchronize()
    window = lt.reset().system
    sampler.stop()
    lt.shutdown()
    del held
    index = torch.cuda.current_device()
    if window is None:
        print("nvml: no figures")
        return False
    figures = {name: f for name, f in window.figures.items() if name.startswith(f"gpu{index}_")}
    for name, stats in sorted(figures.items()):
        print(f"nvml {name}: mean {stats.mean:.1f}, max {stats.max:.1f} ({stats.samples} samples)")
    util = figures.get(f"gpu{index}_utilization_percent")
    used = figures.get(f"gpu{index}_memory_used_bytes")
    temp = figures.get(f"gpu{index}_temperature_c")
    power = figures.get(f"gpu{index}_power_w")
    return (
        util is not None
        and util.max >= 50
        and used is not None
        and used.max >= 1 << 30
        and temp is not None
        and 0 < temp.mean < 120
        and power is not None
        and power.mean > 0
    )


if __name__ == "__main__":
    sys.exit(main())
