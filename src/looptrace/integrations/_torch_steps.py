"""Where an instrumented PyTorch call goes: which section, which lap, nested in whose timer.

`Steps` turns the calls the patches see (a DataLoader fetch, an outermost module call, a
backward, an optimizer step, `torch.save`) into sections of one lap timer, a lap per
optimizer step, without any call in the training loop. A section the user (or the Lightning
or Hugging Face integration) has running wins: the call is timed as a section nested in it,
or not at all when that section already has the same name.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from looptrace._core.section import Section
    from looptrace._core.timer import Timer
    from looptrace._looptrace import Looptrace

# What the patches see, and the section each is timed as.
DATA, FORWARD, BACKWARD, OPTIMIZER, CHECKPOINT = (
    "data",
    "forward",
    "backward",
    "optimizer",
    "checkpoint",
)
EVALUATION = "evaluation"
WINDOW = "window"  # closing a window across ranks (`reset_every` in a job of several)
_LAPPING = frozenset({DATA, FORWARD, BACKWARD, OPTIMIZER})  # may begin the next step


class _Thread(threading.local):
    """What one thread's loop has done in its current step."""

    def __init__(self) -> None:
        self.active: Section | None = None  # one of ours is entered: calls inside are its own
        self.owned = False  # the lap timer runs because these calls started it
        self.stepped: set[int] = set()  # optimizers stepped in this lap (ids)
        self.trained = False  # a training forward or backward since the last optimizer step
        self.forwarded = False  # a forward in this lap (loops with no backward lap at fetches)
        self.evaluating: Section | None = None  # the evaluation phase, entered
        self.fetched: set[int] = set()  # loaders fetched from since the last training call
        self.evaluated: set[int] = set()  # loaders fetched from in the evaluation


class Steps:
    """Times the calls of a PyTorch loop as sections of timer `root.<name>`, a lap per step.

    A step ends with an optimizer step (or a `GradScaler.step`) once every optimizer known
    has stepped in it: the next fetch, forward, backward or optimizer step starts the next
    lap, so gradient accumulation's micro-batches and a GAN's two optimizers fall in one
    step. Optimizers passed to `instrument()` are known from the start; otherwise each is
    learnt at its first step (a second optimizer's first step then ends a lap early once).
    A loop that never calls backward laps at each fetch after a forward.
    """

    def __init__(
        self,
        lt: Looptrace,
        name: str,
        *,
        optimizers: Iterable[object] = (),
        reset_every: int | None = None,
    ) -> None:
        self.lt = lt
        self.timer = lt.timer(name)
        self.local = _Thread()
        self.known = {id(opt) for opt in optimizers}
        self.fixed = bool(self.known)  # the optimizers were given: learn no others
        self.optimizer_seen = False  # an optimizer has stepped
        self.backward_seen = False
        self.distributed = False  # a DDP/FSDP model was called: backward holds the all-reduce
        self.train_loaders: set[int] = set()  # loaders fetched from outside an evaluation
        self.reset_every = reset_every
        self.steps = 0
        # The sections of the lap timer, made once (`timer.section` is a lookup each call).
        self._sections = {kind: self.timer.section(kind) for kind in (DATA, FORWARD, OPTIMIZER)}

    # -- entering and leaving ------------------------------------------------------------

    def enter(
        self, kind: str, *, evaluating: bool = False, loader: int = 0, last: bool = False
    ) -> Section | None:
        """Enter the section for a call of `kind`; None: the call is not timed on its own.

        `evaluating`: a module call with grad disabled or in eval mode; `loader`: the id of
        the DataLoader a fetch reads; `last`: the fetch that finds the epoch's end (it ends
        the step, never begins one).
        """
        here = self.local
        if here.active is not None:
            return None
        if loader:
            (here.fetched if here.evaluating is None else here.evaluated).add(loader)
        try:
            return self._enter(here, kind, evaluating, loader, last)
        except Exception:
            self.lt.internal_error(f"instrumented {kind}")
            return None

    def _enter(
        self, here: _Thread, kind: str, evaluating: bool, loader: int, last: bool
    ) -> Section | None:
        if here.evaluating is not None:
            if self._stays_in_evaluation(kind, evaluating, loader):
                return None
            if kind != DATA:  # training went on: what it fetched was training's, not evaluation's
                self.train_loaders |= here.evaluated
            self._end_evaluation(here)
        inner = self._innermost()
        timer = self.timer
        if inner is not None and not (inner is timer and here.owned):  # (running: innermost)
            return self._nested(here, inner, kind, evaluating)
        if inner is None:
            if last:
                return None  # finding the end after another timer's last lap: not a lap
            timer.record()  # a new lap: these calls own it
            here.owned = True
            self._new_lap(here)
        if self._between_steps(here) and self._evaluates(kind, evaluating, loader):
            here.evaluating = section = timer.section(EVALUATION)
            section.start()  # in the step that ended: the next lap starts after it
            here.evaluated = {loader} if loader else set()
            here.fetched.discard(loader)
            return None
        if kind in _LAPPING and not last and self._step_done(here, kind):
            timer.record()
            self._new_lap(here)
            self._lapped()
        return self._start(here, timer, kind, evaluating, self._sections.get(kind))

    def _nested(self, here: _Thread, inner: Timer, kind: str, evaluating: bool) -> Section | None:
        """Time the call inside a section someone else runs, unless it has the same name."""
        name = EVALUATION if kind == FORWARD and evaluating else kind
        for level in inner.path.split("."):
            if level.rpartition(":")[2].startswith(name):
                return None  # theirs wins (Lightning's `[Strategy]...:backward`, `optimizer_step`)
        return self._start(here, inner, name, evaluating, None)

    def _start(
        self, here: _Thread, owner: Timer, kind: str, evaluating: bool, section: Section | None
    ) -> Section:
        if section is None or (kind == BACKWARD and self.distributed):
            section = owner.section(kind, wait=kind == BACKWARD and self.distributed)
        section.start()
        here.active = section
        if kind == FORWARD:
            here.forwarded = True
            if not evaluating:
                self._trained(here)
        elif kind == BACKWARD:
            self._trained(here)
            self.backward_seen = True
        return section

    def _trained(self, here: _Thread) -> None:
        """Note a training forward or backward: the loaders fetched from so far are training's."""
        here.trained = True
        if here.fetched:
            self.train_loaders |= here.fetched
            here.fetched = set()

    def leave(self, section: Section, kind: str, optimizer: object = None) -> None:
        """Leave `section` (entered for a call of `kind`); an optimizer step ends a step."""
        here = self.local
        here.active = None
        try:
            section.stop()
            if kind == OPTIMIZER:
                key = id(optimizer)
                here.stepped.add(key)
                if not self.fixed:
                    self.known.add(key)
                self.optimizer_seen = True
                here.trained = False
        except Exception:
            self.lt.internal_error(f"instrumented {kind}")

    def stop(self) -> None:
        """End the evaluation phase and the lap these calls started, in this thread."""
        here = self.local
        try:
            self._end_evaluation(here)
            if here.owned and self.timer.running:
                self.timer.stop()
            here.owned = False
        except Exception:
            self.lt.internal_error("instrumented loop's end")

    # -- steps -----------------------------------------------------------------------------

    def _step_done(self, here: _Thread, kind: str) -> bool:
        """Whether the call of `kind` begins the next step."""
        if here.stepped:
            return kind == DATA or here.stepped >= self.known
        if not self.backward_seen and not self.optimizer_seen:
            return kind == DATA and here.forwarded  # inference: a lap per fetch
        return False

    def _new_lap(self, here: _Thread) -> None:
        here.stepped = set()
        here.forwarded = False

    def _lapped(self) -> None:
        """Count a step; close a window every `reset_every` steps."""
        self.steps += 1
        every = self.reset_every
        if every and self.steps % every == 0:
            if not _distributed_job():
                self.lt.reset()
                return
            # Ranks wait for each other in the cross-rank close: a wait section of its own.
            with self.timer.section(WINDOW, wait=True):
                self.lt.reset(across_ranks=True)

    # -- evaluation --------------------------------------------------------------------------

    def _stays_in_evaluation(self, kind: str, evaluating: bool, loader: int) -> bool:
        if kind == FORWARD:
            return evaluating
        return kind == DATA and loader not in self.train_loaders

    def _between_steps(self, here: _Thread) -> bool:
        """Whether the step is done (every optimizer known stepped) and no new one began."""
        return bool(here.stepped) and here.stepped >= self.known and not here.trained

    def _evaluates(self, kind: str, evaluating: bool, loader: int) -> bool:
        """Whether a call after a step begins an evaluation: an eval forward, another loader."""
        if kind == FORWARD:
            return evaluating
        return kind == DATA and bool(loader) and loader not in self.train_loaders

    def _end_evaluation(self, here: _Thread) -> None:
        section = here.evaluating
        if section is not None:
            here.evaluating = None
            if section.timer.running:
                section.stop()

    def _innermost(self) -> Timer | None:
        """Return the innermost timer running in this thread, None when none runs."""
        return self.lt.innermost_timer()


def _distributed_job() -> bool:
    """Whether a torch.distributed process group of several ranks is initialised."""
    import torch.distributed as dist  # noqa: PLC0415 - imported with the patches

    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)
