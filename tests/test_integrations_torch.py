"""`instrument()`: a PyTorch loop with no looptrace line, timed on a fake clock (CPU torch)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from looptrace.testing import Capture

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
integration = pytest.importorskip("looptrace.integrations.torch")
loops = pytest.importorskip("tests.helpers.torch_loops")

from tests.helpers.torch_loops import (  # noqa: E402 - after the skip
    BACKWARD_S,
    FETCH_S,
    FORWARD_S,
    OPTIMIZER_S,
    SAVE_S,
    ClockSGD,
    Net,
    SlowFile,
    counts,
    loader,
    totals,
    train,
)

N = 8  # items of an epoch, a batch each


def _run(cap: Capture, body: Any, **options: Any) -> Any:
    handle = integration.instrument(cap.lt, **options)
    try:
        body()
    finally:
        handle.uninstrument()
    assert cap.lt.health().internal_errors == 0
    assert cap.lt.health().misuse == 0
    return cap.lt.reset()


def test_a_plain_loop_gets_data_forward_backward_and_optimizer_a_lap_per_step(cap: Capture) -> None:
    """An epoch of 8 steps: 8 forward, backward, optimizer; data holds iter() and the end fetch."""
    model = Net(cap.clock)
    optimizer = ClockSGD(model.parameters(), cap.clock)
    snapshot = _run(cap, lambda: train(model, optimizer, loader(cap.clock, N)))
    assert counts(snapshot) == {
        "root.train": N,  # the fetch that finds the end ends the last step
        "root.train.data": N + 2,
        "root.train.forward": N,
        "root.train.backward": N,
        "root.train.optimizer": N,
    }
    assert totals(snapshot) == {
        "root.train": round(N * (FETCH_S + FORWARD_S + BACKWARD_S + OPTIMIZER_S), 9),
        "root.train.data": round(N * FETCH_S, 9),
        "root.train.forward": round(N * FORWARD_S, 9),
        "root.train.backward": round(N * BACKWARD_S, 9),
        "root.train.optimizer": round(N * OPTIMIZER_S, 9),
    }


def test_gradient_accumulation_is_one_step_of_several_forward_and_backward(cap: Capture) -> None:
    """4 micro-batches per optimizer step: 2 steps of 4 forward, 4 backward and 1 optimizer."""
    model = Net(cap.clock)
    optimizer = ClockSGD(model.parameters(), cap.clock)
    snapshot = _run(cap, lambda: train(model, optimizer, loader(cap.clock, N), accumulate=4))
    assert counts(snapshot) == {
        "root.train": 2,
        "root.train.data": N + 2,
        "root.train.forward": N,
        "root.train.backward": N,
        "root.train.optimizer": 2,
    }


def test_two_optimizers_given_step_once_each_in_one_lap(cap: Capture) -> None:
    """GAN-style: a discriminator and a generator step per batch, one lap holding both."""
    disc, gen = Net(cap.clock), Net(cap.clock)
    opt_d = ClockSGD(disc.parameters(), cap.clock)
    opt_g = ClockSGD(gen.parameters(), cap.clock)

    def body() -> None:
        for x, y in loader(cap.clock, N):
            torch.nn.functional.mse_loss(disc(x), y).backward()
            opt_d.step()
            torch.nn.functional.mse_loss(gen(x), y).backward()
            opt_g.step()

    snapshot = _run(cap, body, optimizer=[opt_d, opt_g])
    assert counts(snapshot) == {
        "root.train": N,
        "root.train.data": N + 2,
        "root.train.forward": 2 * N,
        "root.train.backward": 2 * N,
        "root.train.optimizer": 2 * N,
    }
    assert totals(snapshot)["root.train.optimizer"] == round(2 * N * OPTIMIZER_S, 9)


def test_evaluation_after_a_step_is_one_section_with_its_loader(cap: Capture) -> None:
    """Two epochs each followed by a no-grad eval-mode pass: `evaluation`, role evaluation."""
    model = Net(cap.clock)
    optimizer = ClockSGD(model.parameters(), cap.clock)
    train_loader, val_loader = loader(cap.clock, N), loader(cap.clock, 2)

    def body() -> None:
        for _ in range(2):
            model.train()
            train(model, optimizer, train_loader)
            model.eval()
            with torch.no_grad():
                for x, _y in val_loader:
                    model(x)

    snapshot = _run(cap, body)
    assert counts(snapshot)["root.train.evaluation"] == 2
    assert counts(snapshot)["root.train"] == 2 * N  # each evaluation in the epoch's last step
    assert totals(snapshot)["root.train.evaluation"] == round(2 * 2 * (FETCH_S + FORWARD_S), 9)
    assert counts(snapshot)["root.train.forward"] == 2 * N
    assert totals(snapshot)["root.train.data"] == round(2 * N * FETCH_S, 9)
    assert "root.train.evaluation.data" not in snapshot
    assert cap.lt.roles.of("root.train.evaluation") == "evaluation"


def test_torch_save_is_a_checkpoint_section_of_the_step(cap: Capture) -> None:
    """`torch.save` after the optimizer step: `checkpoint` in that step's lap, role checkpoint."""
    model = Net(cap.clock)
    optimizer = ClockSGD(model.parameters(), cap.clock)
    sink = SlowFile(cap.clock)

    def body() -> None:
        train(model, optimizer, loader(cap.clock, 2))
        torch.save(model.state_dict(), sink)  # type: ignore[arg-type]

    snapshot = _run(cap, body)
    assert counts(snapshot)["root.train.checkpoint"] == 1
    assert totals(snapshot)["root.train.checkpoint"] == SAVE_S
    assert counts(snapshot)["root.train"] == 2
    assert cap.lt.roles.of("root.train.checkpoint") == "checkpoint"


def test_the_users_own_sections_win_and_the_calls_nest_inside(cap: Capture) -> None:
    """A hand-timed loop: its forward is not timed twice; backward nests in the user's `step`."""
    model = Net(cap.clock)
    optimizer = ClockSGD(model.parameters(), cap.clock)
    mine = cap.lt.timer("mine")

    def body() -> None:
        for x, y in mine.iterate(loader(cap.clock, N)):
            with mine.section("forward"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            with mine.section("step"):
                loss.backward()
                optimizer.step()

    snapshot = _run(cap, body)
    assert counts(snapshot) == {
        "root.mine": N,
        "root.mine.data": N + 1,  # the user's `iterate` also times the fetch that finds the end
        "root.mine.forward": N,
        "root.mine.step": N,
        "root.mine.step.backward": N,
        "root.mine.step.optimizer": N,
    }
    assert totals(snapshot)["root.mine.forward"] == round(N * FORWARD_S, 9)


def test_uninstrument_restores_every_patched_callable(cap: Capture) -> None:
    """After `uninstrument()` each patched attribute is the original and no hook is left."""
    from torch.optim import optimizer as hooks
    from torch.utils.data import dataloader

    model = Net(cap.clock)
    optimizer = ClockSGD(model.parameters(), cap.clock)
    places = [
        (torch.nn.Module, "__call__"),
        (torch.Tensor, "backward"),
        (torch.autograd, "backward"),
        (torch, "save"),
        (torch.utils.data.DataLoader, "__iter__"),
        (dataloader._BaseDataLoaderIter, "__next__"),
        (torch.amp.GradScaler, "step"),
    ]
    before = [vars(owner).get(name) for owner, name in places]
    global_hooks = (len(hooks._global_optimizer_pre_hooks), len(hooks._global_optimizer_post_hooks))
    for options in ({}, {"model": model, "optimizer": optimizer}):
        handle = integration.instrument(cap.lt, **options)
        assert handle.active
        handle.uninstrument()
        assert not handle.active
        assert [vars(owner).get(name) for owner, name in places] == before
        assert "__call__" not in vars(Net)
        assert (
            len(hooks._global_optimizer_pre_hooks),
            len(hooks._global_optimizer_post_hooks),
        ) == global_hooks
        assert not optimizer._optimizer_step_pre_hooks
        assert not optimizer._optimizer_step_post_hooks


def test_a_given_model_times_only_its_own_calls(cap: Capture) -> None:
    """With `model=`: another module called outside it is not `forward`."""
    model, other = Net(cap.clock), torch.nn.Linear(4, 1)
    optimizer = ClockSGD(model.parameters(), cap.clock)

    def body() -> None:
        for x, y in loader(cap.clock, N):
            other(x)
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()

    snapshot = _run(cap, body, model=model, optimizer=optimizer)
    assert counts(snapshot)["root.train.forward"] == N
    assert totals(snapshot)["root.train.forward"] == round(N * FORWARD_S, 9)


def test_a_compiled_model_is_one_graph_with_no_break(cap: Capture) -> None:
    """`torch.compile` under instrumentation: one graph, no graph break, forward still timed."""
    from torch._dynamo.utils import counters

    graphs: list[Any] = []

    def backend(graph: Any, inputs: Any) -> Any:
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    counters.clear()
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend=backend)

    def body() -> None:
        for _ in range(3):
            compiled(torch.randn(2, 4)).sum().backward()
            optimizer.step()

    snapshot = _run(cap, body)
    assert len(graphs) == 1
    assert dict(counters["graph_break"]) == {}
    assert counts(snapshot) == {
        "root.train": 3,
        "root.train.forward": 3,
        "root.train.backward": 3,
        "root.train.optimizer": 3,
    }


def test_cpu_autocast_with_a_grad_scaler_is_one_optimizer_section_per_step(cap: Capture) -> None:
    """bfloat16 autocast on the CPU and `GradScaler.step`: one optimizer section, not two."""
    model = Net(cap.clock)
    optimizer = ClockSGD(model.parameters(), cap.clock)
    scaler = torch.amp.GradScaler("cpu")

    def body() -> None:
        for x, y in loader(cap.clock, N):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

    snapshot = _run(cap, body)
    assert counts(snapshot)["root.train.optimizer"] == N
    assert counts(snapshot)["root.train.backward"] == N
    assert totals(snapshot)["root.train.optimizer"] == round(N * OPTIMIZER_S, 9)


def test_reset_every_closes_a_window_every_n_steps(cap: Capture) -> None:
    """`reset_every=4` over 8 steps: two windows closed by the instrumentation."""
    model = Net(cap.clock)
    optimizer = ClockSGD(model.parameters(), cap.clock)
    windows: list[Any] = []
    cap.lt.on_reset(windows.append)
    _run(cap, lambda: train(model, optimizer, loader(cap.clock, N)), reset_every=4)
    assert [counts(window)["root.train.forward"] for window in windows[:2]] == [4, 4]


def test_reset_every_must_be_a_positive_int(cap: Capture) -> None:
    """A bad `reset_every` is refused, naming it."""
    with pytest.raises(ValueError, match="reset_every"):
        integration.instrument(cap.lt, reset_every=0)


def test_the_checkpoint_buffer_is_real(cap: Capture) -> None:
    """What the patched `torch.save` wrote loads back."""
    model = Net(cap.clock)
    handle = integration.instrument(cap.lt)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    handle.uninstrument()
    buffer.seek(0)
    assert set(torch.load(buffer)) == set(model.state_dict())


def test_the_opentelemetry_instrumentor_patches_and_restores(cap: Capture) -> None:
    """`LooptraceInstrumentor().instrument(looptrace=lt)` times the loop; uninstrument restores."""
    pytest.importorskip("opentelemetry.instrumentation", reason="the instrument extra is missing")
    from looptrace.integrations.instrumentor import LooptraceInstrumentor

    call = vars(torch.nn.Module)["__call__"]
    instrumentor = LooptraceInstrumentor()
    assert "torch >= 2.1" in instrumentor.instrumentation_dependencies()
    instrumentor.instrument(looptrace=cap.lt)
    try:
        assert vars(torch.nn.Module)["__call__"] is not call
        model = Net(cap.clock)
        train(model, ClockSGD(model.parameters(), cap.clock), loader(cap.clock, N))
    finally:
        instrumentor.uninstrument()
    assert vars(torch.nn.Module)["__call__"] is call
    assert counts(cap.lt.reset())["root.train.optimizer"] == N


def test_the_environment_chooses_the_parts_and_the_windows(cap: Capture) -> None:
    """`LOOPTRACE_INSTRUMENT=optimizer` patches only the optimizer; bad values are named."""
    from looptrace import ConfigError
    from looptrace.integrations.auto import instrument_from_environment, parts_of, reset_every_of

    assert parts_of({}) == {"data", "forward", "backward", "optimizer", "checkpoint"}
    assert parts_of({"LOOPTRACE_INSTRUMENT": "none"}) == set()
    assert reset_every_of({}) == 100
    with pytest.raises(ConfigError, match="unknown part 'loss'"):
        parts_of({"LOOPTRACE_INSTRUMENT": "data,loss"})
    with pytest.raises(ConfigError, match="LOOPTRACE_RESET_EVERY"):
        reset_every_of({"LOOPTRACE_RESET_EVERY": "0"})
    model = Net(cap.clock)
    optimizer = ClockSGD(model.parameters(), cap.clock)
    handle = instrument_from_environment(cap.lt, {"LOOPTRACE_INSTRUMENT": "optimizer"})
    try:
        train(model, optimizer, loader(cap.clock, N))
    finally:
        handle.uninstrument()
    assert counts(cap.lt.reset()) == {"root.train": N, "root.train.optimizer": N}


def test_a_ddp_models_backward_is_a_wait_section(cap: Capture, tmp_path: Any) -> None:
    """In a one-rank gloo group, calling a DistributedDataParallel model marks `backward` wait."""
    dist = pytest.importorskip("torch.distributed")
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        model = torch.nn.parallel.DistributedDataParallel(Net(cap.clock))
        optimizer = ClockSGD(model.parameters(), cap.clock)
        snapshot = _run(cap, lambda: train(model, optimizer, loader(cap.clock, 2)))
    finally:
        dist.destroy_process_group()
    assert counts(snapshot)["root.train.backward"] == 2
    assert snapshot.roles.of("root.train.backward") == "wait"
    assert snapshot.roles.of("root.train.forward") is None


def test_a_loop_with_no_backward_laps_at_each_fetch(cap: Capture) -> None:
    """Inference only (no_grad, no optimizer): a lap per batch, each call `forward`."""
    model = Net(cap.clock).eval()

    def body() -> None:
        with torch.no_grad():
            for x, _y in loader(cap.clock, N):
                model(x)

    snapshot = _run(cap, body)
    assert counts(snapshot) == {
        "root.train": N,
        "root.train.data": N + 2,
        "root.train.forward": N,
    }
    assert totals(snapshot)["root.train"] == round(N * (FETCH_S + FORWARD_S), 9)


def test_a_no_grad_generator_call_inside_a_gan_step_is_forward(cap: Capture) -> None:
    """A step's `no_grad` call before the other optimizer steps is `forward`, not evaluation."""
    disc, gen = Net(cap.clock), Net(cap.clock)
    opt_d = ClockSGD(disc.parameters(), cap.clock)
    opt_g = ClockSGD(gen.parameters(), cap.clock)

    def body() -> None:
        for x, y in loader(cap.clock, N):
            with torch.no_grad():
                gen(x)  # the discriminator's fake batch
            torch.nn.functional.mse_loss(disc(x), y).backward()
            opt_d.step()
            with torch.no_grad():
                gen(x)  # between the two optimizers' steps
            torch.nn.functional.mse_loss(gen(x), y).backward()
            opt_g.step()

    snapshot = _run(cap, body, optimizer=[opt_d, opt_g])
    assert "root.train.evaluation" not in snapshot
    assert counts(snapshot)["root.train"] == N
    assert counts(snapshot)["root.train.forward"] == 4 * N


@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module .* returned a view tensor")
def test_an_fsdp_models_backward_is_a_wait_section(cap: Capture, tmp_path: Any) -> None:
    """`fully_shard` on the CPU (one-rank gloo group): its backward is marked wait too."""
    dist = pytest.importorskip("torch.distributed")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        model = Net(cap.clock)
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        optimizer = ClockSGD(model.parameters(), cap.clock)
        snapshot = _run(cap, lambda: train(model, optimizer, loader(cap.clock, 2)))
    finally:
        dist.destroy_process_group()
    assert counts(snapshot)["root.train.backward"] == 2
    assert snapshot.roles.of("root.train.backward") == "wait"
