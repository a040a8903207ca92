"""`Timer.iterate()`: a lap per item of an iterable, with each fetch timed as a section.

The fetch of an item (`next()` on a DataLoader, say) is where a loop waits for its data; a
`record("data")` written inside the loop body starts after that wait, hiding it in the
step's self time. Iterating through the timer puts the lap boundary before the fetch.

`Laps` is an iterator object, not a generator: a compiled generator is not finalised when it
is dropped, so a `break` out of the loop would leave its lap running. An object with
`__del__` ends the lap when it is dropped, compiled or not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from typing import TYPE_CHECKING, Final, Generic, TypeVar

if TYPE_CHECKING:
    from looptrace._core.section import Section
    from looptrace._core.timer import Timer

T = TypeVar("T")

_END = object()  # what `next()` returns for an exhausted iterator
SAMPLES: Final = "samples"  # the unit `iterate(items=...)` counts
_UNREAD: Final = -1  # `Laps._remaining` before the first fetch reads `len()`


class Laps(Generic[T]):
    """Yields the items of an iterable, lapping `timer` before each fetch, timed as `fetch`.

    The first lap's fetch also times `iter(iterable)`: a DataLoader starts its workers there
    (each epoch, without `persistent_workers`). An iterable with a `len()` ends with exactly
    that many laps: the fetch that finds the end (where a DataLoader shuts its workers down)
    is timed in the last lap, as one more fetch section, and then `timer` stops. Without a
    length, or with a wrong one, that fetch begins one more lap, which ends
    at once. A fetch that raises ends its section with an error and the lap with it. When the
    loop leaves early (`break`, an exception in the body, a `zip` that ends first) the lap
    ends when this object is closed: when nothing refers to it any more, or by its `close()`.
    With `items` (samples per item, or a callable giving them from the item) each item
    fetched adds its samples to the timer's `"samples"` count, in the lap it starts.
    """

    __slots__ = ("_done", "_fetch", "_items_of", "_iterable", "_iterator", "_remaining", "_timer")

    def __init__(
        self,
        timer: Timer,
        iterable: Iterable[T],
        fetch: Section,
        items: int | Callable[[T], float] | None = None,
    ) -> None:
        self._timer = timer
        self._fetch = fetch
        self._items_of = items
        self._iterable: Iterable[T] | None = iterable  # until its iterator is made
        self._iterator: Iterator[T] | None = None
        # Items left by `len()`, None when it does not say; read at the first fetch, so that
        # nothing here raises (a compiled object's finaliser would find it half made).
        self._remaining: int | None = _UNREAD
        self._done = False

    def __iter__(self) -> Laps[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        try:
            item = self._fetch_next()
        except BaseException:
            self.close()
            raise
        if item is _END:
            self.close()
            raise StopIteration
        items = self._items_of
        if items is not None:
            self._timer.count(SAMPLES, items if isinstance(items, int) else items(item))  # type: ignore[arg-type]  # not _END
        return item  # type: ignore[return-value]  # _END was handled above

    def _fetch_next(self) -> object:
        """Lap the timer and fetch the next item, timed; `_END` when there is none."""
        timer = self._timer
        remaining = self._remaining
        if remaining == _UNREAD:
            remaining = self._remaining = _length(self._iterable)
        if remaining == 0:
            if timer.running:  # the end is found in the last lap, in its fetch section
                with self._fetch:
                    item = next(self._items(), _END)
            else:
                item = next(self._items(), _END)
            if item is not _END:
                timer.record()  # more items than len() promised: a lap, fetched in the last
                self._remaining = None
            return item
        timer.record()
        with self._fetch:
            item = next(self._items(), _END)
        if remaining is not None and item is not _END:
            self._remaining = remaining - 1
        return item

    def _items(self) -> Iterator[T]:
        """Return the iterable's iterator, made on the first call."""
        iterator = self._iterator
        if iterator is None:
            iterable = self._iterable
            assert iterable is not None  # (set until the iterator is made)
            iterator = self._iterator = iter(iterable)
            self._iterable = None
        return iterator

    def close(self) -> None:
        """End the running lap and stop iterating (at once, whatever is left)."""
        if self._done:
            return
        self._done = True
        self._iterable = self._iterator = None
        timer = self._timer
        if not timer._engine.closed and timer.running:
            timer.stop()

    def __del__(self) -> None:
        self.close()


def _length(iterable: Iterable[object] | None) -> int | None:
    """Return how many items `iterable` promises, or None when it does not say."""
    if not isinstance(iterable, Sized):
        return None
    try:
        return len(iterable)
    except TypeError:  # e.g. a DataLoader over an IterableDataset without __len__
        return None
