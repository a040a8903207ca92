"""`Section`: one section of a timer, as a context manager, a decorator, or start()/stop()."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

from looptrace._core.entry import SectionEntry
from looptrace._core.wrap import wrap

if TYPE_CHECKING:
    from looptrace._core.timer import Timer

P = ParamSpec("P")
R = TypeVar("R")


class Section:
    """One section of a timer, usable as `with`, as `@decorator`, or by `start()`/`stop()`.

    The object holds no per-entry state: entries are kept per thread by the engine, so one
    object serves every thread and recursion. `timer.section(name)` returns the same object
    on every call, the one instance of a subclass of its own (`new_section`).
    """

    __slots__ = ("_entry", "_owner", "timer")

    def __init__(self, owner: Timer, timer: Timer, entry: SectionEntry) -> None:
        self._owner = owner
        self.timer = timer
        self._entry = entry

    def __repr__(self) -> str:
        return f"Section({self.timer.path!r})"

    def start(self) -> None:
        """Enter the section (like `record(name)` on its timer)."""
        self._entry.enter()

    def stop(self) -> None:
        """Leave the section entered last by this thread."""
        self._entry.exit(None, None, None)

    def __reduce__(self) -> str:
        """Refuse to be pickled, as its timer does (`Timer.__reduce__`)."""
        return self._owner.__reduce__()

    # What `with` calls are the class's own (see `new_section`); these serve explicit calls.
    def __enter__(self) -> Section:
        self._entry.enter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._entry.exit(exc_type, exc, traceback)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        """Wrap `func` so that every call is one entry of this section.

        For an `async def`, a generator or an async generator function the entry spans the
        whole call: every await, or the iteration until the generator is exhausted or closed.
        """
        return wrap(func, self._owner, self.timer)


def new_section(owner: Timer, timer: Timer) -> Section:
    """Return section `timer` of `owner`: the one instance of a `Section` class of its own.

    `with` looks `__enter__` and `__exit__` up on the type at every block, and binds a method
    found there to the object anew each time: two allocations per block, a seventh of a
    compiled section's cost. This section's class holds its entry's methods bound once
    instead, as static methods, which bind to nothing.
    """
    entry = SectionEntry(owner, timer)
    own = type(
        "Section",
        (Section,),
        {
            "__slots__": (),
            "__module__": Section.__module__,
            "__qualname__": Section.__qualname__,
            "__doc__": Section.__doc__,
            "__enter__": staticmethod(entry.enter),
            "__exit__": staticmethod(entry.exit),
        },
    )
    section = cast("type[Section]", own)(owner, timer, entry)
    entry.section = section
    return section
