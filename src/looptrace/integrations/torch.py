"""PyTorch with no edit to the loop: `instrument()` times data, forward, backward and optimizer.

```python
import looptrace
from looptrace.integrations.torch import instrument

lt = looptrace.configure()
handle = instrument(lt)             # or instrument(lt, model=model, optimizer=opt)
...                                 # the training loop, unchanged
handle.uninstrument()               # every patched callable restored
```

What is patched, each part switched off by its argument: `DataLoader.__iter__` and its
iterator's `__next__` (`data`), `nn.Module.__call__` (`forward`: the outermost module call
of the step; with `model=` only those models' classes), `Tensor.backward` and
`torch.autograd.backward` (`backward`), the optimizers' global step hooks and
`GradScaler.step` (`optimizer`), `torch.save` (`checkpoint`). See `Steps` for the laps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.optim.optimizer as optimizer_hooks
from torch.utils.data import dataloader

from looptrace._looptrace import Looptrace
from looptrace.integrations._torch_steps import (
    BACKWARD,
    CHECKPOINT,
    DATA,
    EVALUATION,
    FORWARD,
    OPTIMIZER,
    Steps,
)

__all__ = ["Instrumented", "instrument"]

# Wrapper classes whose backward holds the gradient all-reduce (a wait section).
_DISTRIBUTED = frozenset({"DistributedDataParallel", "FullyShardedDataParallel", "FSDPModule"})
_is_compiling = torch.compiler.is_compiling


class Instrumented:
    """What `instrument()` patched; `uninstrument()` puts every original back."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self._restore: list[Callable[[], object]] = []

    def __repr__(self) -> str:
        return f"Instrumented({self.steps.timer.path!r}, patches={len(self._restore)})"

    @property
    def lt(self) -> Looptrace:
        """The looptrace the sections go to."""
        return self.steps.lt

    @property
    def active(self) -> bool:
        """Whether the patches are in place."""
        return bool(self._restore)

    def patch(self, owner: object, name: str, replacement: object) -> None:
        """Set `owner.name` to `replacement`, remembering how to restore it."""
        had = name in vars(owner)
        original = vars(owner).get(name)
        setattr(owner, name, replacement)

        def restore() -> None:
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)

        self._restore.append(restore)

    def at_uninstrument(self, undo: Callable[[], object]) -> None:
        """Call `undo()` at `uninstrument()` (the last added first)."""
        self._restore.append(undo)

    def removing(self, handle: Any) -> None:
        """Remember to remove a torch hook handle at `uninstrument()`."""
        self._restore.append(handle.remove)

    def uninstrument(self) -> None:
        """Restore every patched callable, remove the hooks, and end the lap still running."""
        while self._restore:
            self._restore.pop()()
        self.steps.stop()


def instrument(
    lt: Looptrace,
    *,
    model: torch.nn.Module | Iterable[torch.nn.Module] | None = None,
    optimizer: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
    name: str = "train",
    data: bool = True,
    forward: bool = True,
    backward: bool = True,
    optimizer_step: bool = True,
    checkpoint: bool = True,
    reset_every: int | None = None,
) -> Instrumented:
    """Time a PyTorch loop's data, forward, backward and optimizer steps; return the handle.

    Sections go to timer `root.<name>`, a lap per optimizer step (see `Steps`). Modules
    called with grad disabled or in eval mode once a step is done (every optimizer of the
    step stepped) and before the next training call are one `evaluation` section (role
    evaluation) with the fetches of loaders not used in training; `torch.save` is
    `checkpoint` (role checkpoint). Once a DistributedDataParallel or FSDP model is called,
    `backward` is a wait section. A section already running wins: the calls nest inside it,
    skipped where it has the same name.

    Args:
        lt: the configured looptrace.
        model: time only these models' calls as `forward` (default: any outermost module).
        optimizer: the optimizers of a step (default: every optimizer, learnt as it steps).
        name: the lap timer's name.
        data: time DataLoader fetches.
        forward: time module calls (and evaluation).
        backward: time backward.
        optimizer_step: time optimizer steps; without it the laps never end.
        checkpoint: time `torch.save`.
        reset_every: close a window (`lt.reset()`, across ranks in a job of several) every
            this many steps; None leaves windows to the caller.

    Raises:
        ValueError: `reset_every` is not None or an int >= 1.

    """
    if reset_every is not None and (type(reset_every) is not int or reset_every < 1):
        raise ValueError(f"instrument(): reset_every must be None or an int >= 1: {reset_every!r}")
    optimizers = _listed(optimizer)
    models = _listed(model)
    steps = Steps(lt, name, optimizers=optimizers, reset_every=reset_every)
    lt.roles = dataclasses.replace(
        lt.roles,
        evaluation=lt.roles.evaluation | {EVALUATION},
        checkpoint=lt.roles.checkpoint | {CHECKPOINT},
    )
    handle = Instrumented(steps)
    if data:
        _patch_data(handle, steps)
    if forward:
        _patch_forward(handle, steps, models)
    if backward:
        _patch_backward(handle, steps)
    if optimizer_step:
        _patch_optimizers(handle, steps, optimizers)
    if checkpoint:
        handle.patch(torch, "save", _timed(steps, CHECKPOINT, torch.save))
    return handle


def _listed(value: object) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (torch.nn.Module, torch.optim.Optimizer)):
        return [value]
    listed: list[Any] = list(value)  # type: ignore[call-overload]  # an iterable of them
    return listed


def _timed(steps: Steps, kind: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap `call` so that each call outside a section of ours is one section of `kind`."""

    @functools.wraps(call)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if _is_compiling():
            return call(*args, **kwargs)
        section = steps.enter(kind)
        if section is None:
            return call(*args, **kwargs)
        try:
            return call(*args, **kwargs)
        finally:
            steps.leave(section, kind)

    return timed


def _patch_data(handle: Instrumented, steps: Steps) -> None:
    loader_iter = torch.utils.data.DataLoader.__iter__
    fetch = dataloader._BaseDataLoaderIter.__next__

    def __iter__(loader: Any) -> Any:  # noqa: N807 - the patched method
        section = steps.enter(DATA, loader=_source(loader))
        try:
            iterator = loader_iter(loader)
        finally:
            if section is not None:
                steps.leave(section, DATA)
        with contextlib.suppress(Exception):  # a loader's own iterator class may refuse it
            iterator._looptrace_loader = _source(loader)  # type: ignore[attr-defined]  # ours
            iterator._looptrace_len = len(iterator)  # type: ignore[attr-defined]
        return iterator

    def __next__(iterator: Any) -> Any:  # noqa: N807 - the patched method
        section = steps.enter(
            DATA, loader=getattr(iterator, "_looptrace_loader", 0), last=_exhausted(iterator)
        )
        if section is None:
            return fetch(iterator)
        try:
            return fetch(iterator)
        finally:
            steps.leave(section, DATA)

    handle.patch(torch.utils.data.DataLoader, "__iter__", __iter__)
    handle.patch(dataloader._BaseDataLoaderIter, "__next__", __next__)


def _source(loader: Any) -> int:
    """Return the id of a loader's dataset: a new loader each epoch reads the same dataset."""
    return id(getattr(loader, "dataset", loader))


def _exhausted(iterator: Any) -> bool:
    """Whether every item `len()` promised was yielded: this fetch finds the end."""
    try:
        return bool(iterator._num_yielded >= iterator._looptrace_len)
    except Exception:  # an iterable dataset has no length
        return False


def _patch_forward(handle: Instrumented, steps: Steps, models: list[Any]) -> None:
    chosen = {id(model) for model in models}
    if any(_wraps_ranks(model) for model in models):
        steps.distributed = True
    owners = {type(model) for model in models} or {torch.nn.Module}
    for owner in owners:
        handle.patch(owner, "__call__", _module_call(steps, owner.__call__, chosen))


def _module_call(steps: Steps, call: Callable[..., Any], chosen: set[int]) -> Callable[..., Any]:
    """Wrap a module class's `__call__`: the outermost call of a step is `forward`."""
    local = steps.local

    def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        if _is_compiling() or local.active is not None or (chosen and id(module) not in chosen):
            return call(module, *args, **kwargs)  # traced, inside a section of ours, or not ours
        if not steps.distributed and _wraps_ranks(module):
            steps.distributed = True
        evaluating = not (module.training and torch.is_grad_enabled())
        section = steps.enter(FORWARD, evaluating=evaluating)
        if section is None:
            return call(module, *args, **kwargs)
        try:
            return call(module, *args, **kwargs)
        finally:
            steps.leave(section, FORWARD)

    return __call__


def _wraps_ranks(module: object) -> bool:
    return any(cls.__name__ in _DISTRIBUTED for cls in type(module).__mro__)


def _patch_backward(handle: Instrumented, steps: Steps) -> None:
    handle.patch(torch.Tensor, "backward", _timed(steps, BACKWARD, torch.Tensor.backward))
    handle.patch(torch.autograd, "backward", _timed(steps, BACKWARD, torch.autograd.backward))


def _patch_optimizers(handle: Instrumented, steps: Steps, optimizers: list[Any]) -> None:
    entered: dict[int, Any] = {}  # optimizer id -> its section, between the two hooks

    def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
        section = steps.enter(OPTIMIZER)
        if section is not None:
            entered[id(optimizer)] = section

    def post(optimizer: Any, args: Any, kwargs: Any) -> None:
        section = entered.pop(id(optimizer), None)
        if section is not None:
            steps.leave(section, OPTIMIZER, optimizer)

    if optimizers:
        for optimizer in optimizers:
            handle.removing(optimizer.register_step_pre_hook(pre))
            handle.removing(optimizer.register_step_post_hook(post))
    else:
        handle.removing(optimizer_hooks.register_optimizer_step_pre_hook(pre))
        handle.removing(optimizer_hooks.register_optimizer_step_post_hook(post))
    scaler = torch.amp.GradScaler
    scaler_step = scaler.step
    chosen = {id(optimizer) for optimizer in optimizers}

    def step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        if chosen and id(optimizer) not in chosen:
            return scaler_step(self, optimizer, *args, **kwargs)
        section = steps.enter(OPTIMIZER)
        if section is None:
            return scaler_step(self, optimizer, *args, **kwargs)
        try:
            return scaler_step(self, optimizer, *args, **kwargs)
        finally:
            steps.leave(section, OPTIMIZER, optimizer)

    handle.patch(scaler, "step", step)
