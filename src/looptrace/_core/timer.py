"""Hierarchical lap timers: `record()`, `stop()`, and sections as context managers/decorators."""

from __future__ import annotations

import math
from asyncio.events import _get_running_loop
from collections.abc import Callable, Iterable, Iterator
from typing import Final, ParamSpec, TypeVar

from looptrace._base.errors import TimerError
from looptrace._core.calls import ENTER, EXIT, RECORD, STOP, begin
from looptrace._core.engine import Engine
from looptrace._core.handoff import leave_elsewhere
from looptrace._core.intervals import Interval, NodeState, ThreadState, find
from looptrace._core.iterate import Laps
from looptrace._core.section import Section, new_section
from looptrace._core.threadkey import now_plain
from looptrace._stats.aggregator import OTHER_PATH
from looptrace._stats.snapshot import Snapshot
from looptrace._stats.tally import Tally

P = ParamSpec("P")
R = TypeVar("R")

_HUGE: Final = 2**1000  # an int count beyond this is refused (no float can hold it)
MAX_NAME_LENGTH: Final = 200  # a section name longer than this is a TimerError
# A constant, not a module global: read on every call, compiled it is a C static.
_running_loop: Final = _get_running_loop


class Timer:
    """A named timer at a dotted path (`root.training`), with child timers as its sections.

    Lap state lives per thread in the engine, so one timer can be shared by threads and used
    recursively; the object itself holds only its name and children.
    """

    __slots__ = (
        "_children",
        "_engine",
        "_overflow",
        "_section",
        "_units",
        "device",
        "mine",
        "name",
        "overflow",
        "parent",
        "path",
    )

    def __init__(
        self,
        engine: Engine,
        name: str,
        parent: Timer | None,
        *,
        device: bool = False,
        path: str | None = None,
    ) -> None:
        self._engine = engine
        self.name = name
        self.device = device
        self.parent = parent
        if path is None:
            path = name if parent is None else f"{parent.path}.{name}"
        self.path: str = path  # (the object the aggregator admitted: sets compare it by identity)
        self._children: dict[str, Timer] = {}
        self._section: Section | None = None
        self._overflow: Timer | None = None  # times every name past the path cap
        self.overflow = False  # whether it is its parent's `other`, timing names past the cap
        self._units: dict[str, tuple[str, str]] = {}  # unit -> its key in a thread's counts
        self.mine: NodeState | None = None  # its state in the thread that used it last

    def __repr__(self) -> str:
        return f"Timer({self.path!r})"

    def timer(self, name: object, *, device: bool | None = None) -> Timer:
        """Return the child timer `name`, a str (the same object on every call).

        `device=True` makes it time on the GPU with CUDA events (see "GPU time" in the docs,
        docs/gpu.md); the choice is made when the timer is first created. Names are typed
        `object` so that anything else is a `TimerError` naming it, compiled core or not.
        """
        child = self._children.get(name) if isinstance(name, str) else None
        if child is None:
            name = self._check_name(name)
            engine = self._engine
            path = f"{self.path}.{name}"
            if self.overflow or engine.aggregator.admit(path) != path:
                return self._overflowed(device)
            child = self._children.setdefault(
                name, Timer(engine, name, self, device=bool(device), path=path)
            )
        elif device is not None and device != child.device:
            raise TimerError(
                f"timer {child.path!r} already times on the {'device' if child.device else 'host'}"
            )
        return child

    def _overflowed(self, device: bool | None) -> Timer:
        """Return the one child that times every name past the path cap: `<path>.other`."""
        overflow = self._overflow
        if overflow is None:
            path = self._engine.aggregator.overflow_of(self.path)
            overflow = Timer(self._engine, OTHER_PATH, self, device=bool(device), path=path)
            overflow.overflow = True
            self._overflow = overflow
        return overflow

    def reset(self, *, across_ranks: bool = False) -> Snapshot:
        """Close the window of this timer and its descendants and return its statistics.

        The same cut as `Looptrace.reset()`, for this subtree only: its running sections
        contribute their part before the cut and keep running, other timers' windows go on.
        The snapshot's `subtree` is this timer's path; outputs name it. On the root timer it
        is `lt.reset()`. `across_ranks` is as for `Looptrace.reset()`: every rank must reset
        the same timer at the same point.

        Raises:
            TimerError: the timer belongs to no `Looptrace`.

        """
        reset = self._engine.reset_timer
        if reset is None:
            raise TimerError(f"timer {self.path!r} belongs to no looptrace: nothing to reset")
        return reset(self, across_ranks)

    @property
    def running(self) -> bool:
        """Whether this timer has a running interval in the calling thread."""
        mine = self._engine.state().nodes.get(self)
        return mine is not None and bool(mine.stack)

    def record(  # noqa: PLR0912 - hot path, inlined
        self, name: object = None, *, wait: bool = False
    ) -> None:
        """Lap this timer, or switch it to section `name` (a str).

        `record()` ends the running interval (one measurement) and starts the next at the same
        instant, or starts one on a stopped timer. `record(name)` starts this timer if needed,
        ends the running sibling sections, and starts `name` (lapping it if it was running).
        `wait=True` marks section `name` as one where ranks wait for each other (a
        collective), as `configure(wait_sections=...)` does by name, for this path.

        Raises:
            TimerError: `wait=True` without a section name.

        """
        if name is None:
            child = None
            if wait:
                raise TimerError(f"{self.path}.record(wait=True) needs the name of a section")
        else:
            child = self._children.get(name) if isinstance(name, str) else None
            if child is None:  # first use, or not a name at all
                child = self.timer(name)
            if wait and child.path not in self._engine.wait_paths:
                self._engine.mark_wait(child.path)
        engine = self._engine
        found, now, was = begin(engine, self, RECORD)
        if found is None:
            return
        state = found  # (of its type: compiled, no check at each use)
        try:
            mine = self.mine  # (`find`, its common case inline)
            if mine is None or mine.owner is not state:
                mine = find(state, self)
            stack = None if mine is None else mine.stack
            if child is None:
                if stack:
                    engine.lap(state, stack[0], now)
                else:
                    started = engine.start(state, self, now, engine.parent_for(state, self))
                    started.state.lapped = True
            elif not (stack and engine.switch_in_place(state, stack[-1], child, now)):
                current = engine.run_owner_for(state, self, child, now)
                running = find(state, child)
                if running is not None and running.stack:
                    engine.end(state, running.stack[0], now)
                engine.start(state, child, now, current)
        except Exception:  # a bug of looptrace's: counted, never raised into the loop
            engine.incidents.failed("record()")
        finally:
            state.busy = was
        if state.fold_due:
            engine.windows.merge_pending(state)

    def stop(self) -> None:
        """End the running interval (and its sections) without starting a new one."""
        engine = self._engine
        state, now, was = begin(engine, self, STOP)
        if state is None:
            return
        try:
            mine = find(state, self)
            was_running = mine is not None and bool(mine.stack)
            if mine is not None and mine.stack:
                engine.end(state, mine.stack[0], now)
        except Exception:  # a bug of looptrace's: counted, never raised into the loop
            engine.incidents.failed("stop()")
            was_running = True
        finally:
            state.busy = was
        if not was_running:
            engine.incidents.misused("stopped", f"{self.path}.stop() on a stopped timer")
        if state.fold_due:
            engine.windows.merge_pending(state)

    def count(self, unit: object, n: object = 1, *, flops_per_unit: object = None) -> None:
        """Add `n` units (`"samples"`, `"tokens"`: any name a section could have) to the window.

        The units count for this timer's path in the window open now (a count made before a
        `reset()` is in the closing window, one made after it in the next), on any thread,
        and give the window's rates (`Snapshot.rates`). `n` is a number, at least 0.
        `flops_per_unit` is what one of these units costs (a transformer's token: about 6 x
        its parameters to train, 2 x to infer), overriding `configure(flops_per_unit=...)`
        for this count; with `configure(peak_flops=...)` the rate gets its MFU.

        Raises:
            TimerError: `unit` is not a valid name, or `n` or `flops_per_unit` is not a finite
                number >= 0.

        """
        key = self._units.get(unit) if isinstance(unit, str) else None
        if key is None:
            key = self._unit_key(unit)
        amount = float(n) if type(n) is int and 0 <= n < _HUGE else _amount(n, key)
        price = 0.0 if flops_per_unit is None else _amount(flops_per_unit, key, "flops_per_unit")
        engine = self._engine
        if engine.closed:
            engine.refuse(f"{self.path}.count() after shutdown()")
            return
        state = engine.states.last
        # One call checks the thread and the loop (`int()` stands for the clock): else None.
        if state is None or now_plain(state.key, int, _running_loop) is None:
            state = engine.states.state()
        was = state.busy
        state.busy = True  # no lock: see `ThreadState`
        if state.claimed and not was and not state.wait_turn():  # shut down since the check
            state.busy = was
            return
        tally = state.counts.get(key)
        if tally is None:
            tally = state.counts[key] = Tally()
        tally.total += amount
        if flops_per_unit is not None:
            tally.flops += amount * price
            tally.priced += amount
        state.busy = was

    def _unit_key(self, unit: object) -> tuple[str, str]:
        """Return the key of a unit new to this timer, checked like a section name."""
        name = self._check_name(unit)
        key = self._units[name] = (self.path, name)
        return key

    def section(self, name: object, *, wait: bool = False) -> Section:
        """Return section `name` (a str): a context manager, decorator, or start/stop pair.

        Entering it is `record(name)`, except that entering a section that is already running
        in this thread (recursion) nests a new interval instead of lapping it. Leaving it ends
        that interval only; this timer keeps running. `wait=True` marks it as a section where
        ranks wait for each other (see `record`).
        """
        child = self._children.get(name) if isinstance(name, str) else None
        if child is None:  # first use, or not a name at all
            child = self.timer(name)
        if wait and child.path not in self._engine.wait_paths:
            self._engine.mark_wait(child.path)
        section = child._section
        if section is None:
            section = child._section = new_section(self, child)
        return section

    def iterate(
        self,
        iterable: Iterable[R],
        section: str = "data",
        items: int | Callable[[R], float] | None = None,
    ) -> Iterator[R]:
        """Yield the items of `iterable`, one lap of this timer each, the fetch timed as `section`.

        `for batch in train.iterate(loader):` measures the wait for every batch, the first
        lap's including `iter(loader)` (a DataLoader starts its workers there); the timer stops
        when the iterable is exhausted, or when the loop leaves early (`break`, an error) and
        drops the iterator. `items` counts `"samples"` (`count()`) for each item fetched: an
        int is the samples per item, a callable returns them from the item (`lambda b:
        len(b[0])`); None counts nothing.

        Raises:
            TimerError: `items` is neither None, an int >= 0 nor a callable.

        """
        if items is not None and not callable(items):
            _amount(items, (self.path, "samples"))
        return Laps(self, iterable, self.section(section), items)

    def timed(self, name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a function so each call is a section (default name: the function's)."""

        def decorate(func: Callable[P, R]) -> Callable[P, R]:
            section_name = name if name is not None else func.__qualname__.rsplit(".", 1)[-1]
            return self.section(section_name)(func)

        return decorate

    def _enter(self, child: Timer, *, hold: bool) -> Interval | None:
        """Enter section `child`; with `hold`, push it on the thread's entries of `child`."""
        engine = self._engine
        state, now, was = begin(engine, child, ENTER)
        if state is None:
            return None
        try:
            return self._entered(state, child, now, hold=hold)
        except Exception:  # a bug of looptrace's: counted, never raised into the loop
            engine.incidents.failed("a section entry")
            return None
        finally:
            state.busy = was

    def _entered(self, state: ThreadState, child: Timer, now: int, *, hold: bool) -> Interval:
        """Enter section `child` at `now` in `state`, marked busy: the general entry."""
        engine = self._engine
        running = find(state, child)
        inside = _inside_entry(state, self)
        if inside is not None:  # another entry of a section of this timer is open: nest
            interval = engine.start(state, child, now, inside, running)
        elif running is not None and running.stack:  # recursion: nest in its latest one
            interval = engine.start(state, child, now, running.stack[-1], running)
        else:
            current = engine.run_owner_for(state, self, child, now, True)
            interval = engine.start(state, child, now, current, running)
        interval.held = True
        if hold:
            interval.state.push_entry(interval)
        return interval

    def _exit(self, child: Timer, interval: Interval | None, error: BaseException | None) -> None:
        """Leave an entry of section `child`: `interval`, or (None) the thread's latest held one."""
        engine = self._engine
        state, now, was = begin(engine, child, EXIT)
        if state is None:  # shut down: shutdown() ended the section
            return
        if interval is not None and interval.state.owner is not state:
            # Entered in another task or thread (e.g. an async generator that asyncio's
            # finaliser closes in a task of its own): it ends in the state it was made in.
            state.busy = was
            leave_elsewhere(engine, interval, error)
            return
        try:
            left = self._left(state, child, now, interval, error)
        except Exception:  # a bug of looptrace's: counted, never raised into the loop
            engine.incidents.failed("a section exit")
            return
        finally:
            state.busy = was
        if not left:
            self._unmatched(child)
        if state.fold_due:
            engine.windows.merge_pending(state)

    def _unmatched(self, child: Timer) -> None:
        """Count an exit of section `child` with no entry of it held, unless shut down."""
        if not self._engine.closed:
            self._engine.incidents.misused(
                "stopped", f"section {child.path!r} stopped more often than started"
            )

    def _left(
        self,
        state: ThreadState,
        child: Timer,
        now: int,
        interval: Interval | None,
        error: BaseException | None,
    ) -> bool:
        """Leave an entry of `child` at `now` in `state`, marked busy: the general exit.

        False when no entry was held (`interval` None: the thread's latest held one).
        """
        held = interval is None  # (else a token its caller keeps: never reused)
        if held:
            node = find(state, child)
            interval = None if node is None else node.pop_entry()
            if interval is None:
                return False
        engine = self._engine
        # A lap or sibling switch inside the block may have ended it already.
        if interval is not None and not engine.closed:
            stack = interval.state.stack
            if (stack and stack[-1] is interval) or interval in stack:
                engine.leave(state, interval, now, error, held=held)
        return True

    def _check_name(self, name: object) -> str:
        """Return `name` if it can name a section, else raise a `TimerError` saying why.

        Called once per name: the children keep the names that passed.
        """
        if not isinstance(name, str):
            raise TimerError(f"a section name must be a str, got {type(name).__name__} {name!r}")
        if not name:
            raise TimerError("a section name must not be empty")
        if len(name) > MAX_NAME_LENGTH:
            raise TimerError(
                f"section name {name[:40]!r}... is {len(name)} characters long; the limit is "
                f"{MAX_NAME_LENGTH}"
            )
        if "." in name:
            raise TimerError(f"section name {name!r} contains '.', which separates path levels")
        if not name.isascii():
            try:
                name.encode()
            except UnicodeEncodeError as error:  # a lone surrogate, e.g. from os.fsdecode()
                raise TimerError(
                    f"section name {name!r} of timer {self.path!r} cannot be encoded as UTF-8 "
                    f"(character {name[error.start]!r} at index {error.start}): names must be "
                    "text, e.g. bytes decoded with errors='replace'"
                ) from None
        return name

    def __reduce__(self) -> str:
        """Refuse to be pickled: a timer's laps live in the process that made it."""
        raise TimerError(
            f"timer {self.path!r} cannot be pickled (e.g. into a DataLoader worker started "
            "with 'spawn'): its laps live in this process. Create timers in the worker "
            "instead: call looptrace.configure() there (e.g. in worker_init_fn) and look the "
            "timer up by its name, lt.timer(name); pass the name, not the timer"
        )


def _amount(n: object, key: tuple[str, str], name: str = "n") -> float:
    """Return the number `n` as a float, or raise a `TimerError` naming the unit and why."""
    if isinstance(n, (int, float)) and not isinstance(n, bool):
        amount = float(n) if isinstance(n, float) or abs(n) < _HUGE else math.inf
        if amount >= 0 and amount != math.inf:
            return amount
    message = f"count({key[1]!r}) of timer {key[0]!r}: {name} must be a finite number >= 0"
    raise TimerError(f"{message}, got {n!r}"[:300])


def _inside_entry(state: ThreadState, owner: Timer) -> Interval | None:
    """Return where a new section entry of `owner` nests, None if it nests in nothing open.

    While an entry of one of `owner`'s sections is open (a `with` block, a decorated call),
    a section entered inside it (a decorated function calling another) nests in the
    innermost interval running there, as recursion does, instead of ending it as a sibling.
    """
    mine = find(state, owner)
    if mine is None or not mine.stack:
        return None
    children = mine.stack[-1].children
    if not children:
        return None
    for running in children:
        if running.held:
            break
    else:
        return None
    inner = children[-1]
    while inner.children:
        inner = inner.children[-1]
    return inner
