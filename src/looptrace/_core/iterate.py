"""`Timer.iterate()`: a lap per item of an iterable, with each fetch timed as a section.

The fetch of an item (`next()` on a DataLoader, say) is where a loop waits for its data; a
`record("data")` written inside the loop body starts after that wait, hiding it in the
step's self time. Iterating through the timer puts the lap boundary before the fetch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from looptrace._core.section import Section
    from looptrace._core.timer import Timer

T = TypeVar("T")

_END = object()  # what `next()` returns for an exhausted iterator


def laps(timer: Timer, iterable: Iterable[T], fetch: Section) -> Iterator[T]:
    """Yield the items of `iterable`, lapping `timer` before each fetch, timed as `fetch`.

    An iterable with a `len()` ends with exactly that many laps: after the last item `timer`
    stops, and the fetch that finds the end is not timed. Without a length, or with a wrong
    one, that fetch begins one more lap, which ends at once. A fetch that raises ends its
    section with an error and the lap with it. When the loop leaves early (`break`, an
    exception in the body) the lap ends when the iterator is closed: at once in CPython when
    nothing else refers to it, or by calling its `close()`.
    """
    iterator = iter(iterable)
    remaining = _length(iterable)
    try:
        while True:
            if remaining == 0:
                if timer.running:
                    timer.stop()  # the last lap ends here; finding the end is not timed
                item = next(iterator, _END)
                if item is _END:
                    return
                timer.record()  # more items than len() promised: a lap, its fetch untimed
                remaining = None
            else:
                timer.record()
                with fetch:
                    item = next(iterator, _END)
                if item is _END:
                    return
                if remaining is not None:
                    remaining -= 1
            yield item  # type: ignore[misc]  # _END was returned above
    finally:
        if timer.running:
            timer.stop()


def _length(iterable: Iterable[object]) -> int | None:
    """Return how many items `iterable` promises, or None when it does not say."""
    if not isinstance(iterable, Sized):
        return None
    try:
        return len(iterable)
    except TypeError:  # e.g. a DataLoader over an IterableDataset without __len__
        return None
