"""A sample training loop timed by looptrace, for the stacks in deploy/.

Where the telemetry goes comes from the standard OpenTelemetry variables, exactly as in any
application that uses looptrace (nothing here is specific to the sample):

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318   # the node's collector (compose: the agent)
    OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf           # or grpc with port 4317
    LOOPTRACE_TRACE_FILE=runs/spans.jsonl               # offline: spans to files, replayed later

Run it as one process, or as several ranks under a launcher; every rank of a step lands in
one trace, and the straggler rank (the last one, unless told otherwise) shows up in the
dashboard's per-rank panels:

    python deploy/train.py
    torchrun --nproc-per-node=4 deploy/train.py          # with torch: a real DDP model on gloo
    python deploy/train.py --simulate                    # without torch: sleeps of the same shape
    python deploy/train.py --torch-profile trace.json    # steps 5-7 under torch.profiler

Without torch, or with `--simulate`, every section sleeps a randomised time instead of
computing; ranks are then independent (no collective to wait on). With `--torch-profile`, the
torch.profiler trace (Chrome/Perfetto JSON) shows looptrace's sections (`root.train.forward` …)
as ranges around the operators they ran.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import looptrace


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600, help="training steps (600)")
    parser.add_argument(
        "--reset-every", type=int, default=20, help="steps per statistics window (20)"
    )
    parser.add_argument(
        "--simulate", action="store_true", help="sleep instead of computing (implied without torch)"
    )
    parser.add_argument(
        "--slow-rank",
        type=int,
        default=None,
        help="the rank whose data loading is slow (default: the last rank; -1 for none)",
    )
    parser.add_argument(
        "--data-ms", type=float, default=8.0, help="median data-loading time in ms (8)"
    )
    parser.add_argument(
        "--service-name",
        default=os.environ.get("OTEL_SERVICE_NAME", "looptrace-sample"),
        help="service.name of the telemetry (OTEL_SERVICE_NAME, else looptrace-sample)",
    )
    parser.add_argument(
        "--torch-profile",
        metavar="TRACE.json",
        help="record steps 5-7 with torch.profiler and write its Chrome trace here",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.reset_every < 1:
        parser.error("--steps and --reset-every must be at least 1")
    return args


class Simulated:
    """Sections that sleep for log-normally distributed times shaped like a training step."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def _sleep(self, median_ms: float, spread: float = 0.2) -> None:
        time.sleep(self._rng.lognormvariate(0.0, spread) * median_ms / 1000)

    def forward(self) -> None:
        """Stand in for the forward pass."""
        self._sleep(12.0)

    def backward(self) -> None:
        """Stand in for the backward pass."""
        self._sleep(24.0, 0.1)

    def optimizer(self) -> None:
        """Stand in for the optimizer step."""
        self._sleep(3.0, 0.1)

    def close(self) -> None:
        """Nothing to release."""


class TorchModel:
    """A small MLP on random data; DDP over gloo when launched with several ranks."""

    def __init__(self, world_size: int) -> None:
        import torch  # noqa: PLC0415  (optional: the sample simulates without it)
        import torch.distributed as dist  # noqa: PLC0415

        self._torch = torch
        self._dist = dist
        torch.manual_seed(0)
        net: Any = torch.nn.Sequential(
            torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)
        )
        self._distributed = world_size > 1 and dist.is_available()
        if self._distributed:
            dist.init_process_group("gloo")
            net = torch.nn.parallel.DistributedDataParallel(net)
        self._net = net
        self._opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        self._batch = torch.randn(64, 512)
        self._loss: Any = None

    def forward(self) -> None:
        """Run the forward pass and the loss."""
        self._loss = self._net(self._batch).pow(2).mean()

    def backward(self) -> None:
        """Back-propagate; under DDP this all-reduces, so fast ranks wait for a slow one."""
        self._loss.backward()

    def optimizer(self) -> None:
        """Apply and clear the gradients."""
        self._opt.step()
        self._opt.zero_grad(set_to_none=True)

    def close(self) -> None:
        """Leave the process group once every rank is done with it.

        Without the barrier a rank that finishes first can tear gloo down while another still
        talks to it, and that one aborts ("terminate called without an active exception").
        DDP's reducer holds the group too: it goes first, so no destructor of it runs against
        a destroyed group at interpreter exit.
        """
        if self._distributed:
            self._loss = self._opt = self._net = None
            gc.collect()
            self._dist.barrier()
            self._dist.destroy_process_group()


class StepProfiler:
    """torch.profiler over a few steps; looptrace's sections are ranges in its trace."""

    FIRST, LAST = 5, 7

    def __init__(self, path: str) -> None:
        import torch  # noqa: PLC0415  (only with --torch-profile)

        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profile = torch.profiler.profile(activities=activities)
        self._path = path
        self._running = False

    def before(self, step: int) -> None:
        """Start recording at the first profiled step."""
        if step == self.FIRST:
            self._profile.start()
            self._running = True

    def after(self, step: int, last: int) -> None:
        """Stop at the last profiled step (or the run's last) and write the trace."""
        if self._running and step in (self.LAST, last):
            self._profile.stop()
            self._running = False
            self._profile.export_chrome_trace(self._path)


def make_model(simulate: bool, world_size: int, rng: random.Random) -> Simulated | TorchModel:
    """Return the torch model, or the simulation when asked or when torch is missing."""
    if not simulate:
        try:
            return TorchModel(world_size)
        except ImportError:
            print("torch is not installed: simulating the sections", file=sys.stderr)
    return Simulated(rng)


def report(step: int, stats: looptrace.Snapshot, print_line: Callable[[str], None]) -> None:
    """Print one line per window: step time, slowest section and (across ranks) slowest rank."""
    lap = stats.get("root.train")
    if lap is None or lap.count == 0:
        return
    sections = [(s.p99, path) for path, s in stats.items() if path.startswith("root.train.")]
    p99, slowest = max(sections) if sections else (0.0, "-")
    line = (
        f"step {step:5d}  step mean {lap.mean * 1e3:7.2f} ms  p99 {lap.p99 * 1e3:7.2f} ms  "
        f"slowest section p99: {slowest} {p99 * 1e3:.2f} ms"
    )
    spread = (stats.across_ranks or {}).get("root.train.data")
    if spread is not None and spread.mean.min > 0:
        line += (
            f"  data: rank {spread.mean.slowest_rank} at "
            f"{spread.mean.max / spread.mean.min:.1f}x the fastest"
        )
    print_line(line)


def main(argv: list[str] | None = None) -> int:
    """Train for `--steps` steps, timing data, forward, backward and optimizer per step."""
    args = parse_args(argv)
    rank = looptrace.RankInfo.from_env()
    slow_rank = rank.world_size - 1 if args.slow_rank is None else args.slow_rank
    rng = random.Random(rank.rank)
    lt = looptrace.configure(service_name=args.service_name)
    model = make_model(args.simulate, rank.world_size, rng)
    data_ms = args.data_ms * (4.0 if rank.rank == slow_rank and rank.world_size > 1 else 1.0)

    def say(line: str) -> None:
        if rank.rank == 0:
            print(line, flush=True)

    train = lt.timer("train")
    profiler = StepProfiler(args.torch_profile) if args.torch_profile else None
    try:
        for step in range(1, args.steps + 1):
            if profiler is not None:
                profiler.before(step)
            train.record("data")
            time.sleep(rng.lognormvariate(0.0, 0.3) * data_ms / 1000)
            train.record("forward")
            model.forward()
            train.record("backward")
            model.backward()
            with train.section("optimizer"):
                model.optimizer()
            if step < args.steps:
                train.record()  # the step ends and the next one starts
            else:
                train.stop()  # the last step ends
            if profiler is not None:
                profiler.after(step, args.steps)
            if step % args.reset_every == 0 or step == args.steps:
                # Across ranks when torch.distributed runs (a collective: every rank is here).
                report(step, lt.reset(across_ranks=True), say)
    finally:
        lt.shutdown()
        model.close()
    say(f"health: {lt.health()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
