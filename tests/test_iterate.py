"""Timer.iterate(): a lap per item, each fetch timed as a section, the timer stopped at the end."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import looptrace
from looptrace.testing import Capture, FakeClock

from .helpers.timing import counts, totals


class Loader:
    """A sized iterable whose every fetch takes the next of `fetch_s` on the fake clock.

    `iter()` on it takes `start_s` (a DataLoader starting its workers).
    """

    def __init__(
        self,
        clock: FakeClock,
        fetch_s: list[float],
        length: int | None = None,
        *,
        start_s: float = 0.0,
    ) -> None:
        self.clock = clock
        self.fetch_s = fetch_s
        self.length = len(fetch_s) if length is None else length
        self.start_s = start_s

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        self.clock.advance(self.start_s)
        return self._items()

    def _items(self) -> Iterator[int]:
        for index, seconds in enumerate(self.fetch_s):
            self.clock.advance(seconds)
            yield index
        self.clock.advance(0.5)  # finding the end takes time too


def unsized(clock: FakeClock, fetch_s: list[float]) -> Iterator[int]:
    """Yield like `Loader`, with no len()."""
    yield from Loader(clock, fetch_s)


def test_a_lap_per_item_and_each_fetch_timed(cap: Capture) -> None:
    """Three items give three laps; each fetch is `data`, the one finding the end in the last."""
    train = cap.lt.timer("train")
    seen = []
    for batch in train.iterate(Loader(cap.clock, [0.1, 0.2, 0.3])):
        seen.append(batch)
        with train.section("forward"):
            cap.clock.advance(1.0)
    assert not train.running
    snap = cap.lt.reset()
    assert (seen, counts(snap), totals(snap)) == (
        [0, 1, 2],
        {"root.train": 3, "root.train.data": 4, "root.train.forward": 3},
        # The 0.5 s that finding the end took is in the last lap, a fetch of its own.
        {"root.train": 4.1, "root.train.data": 1.1, "root.train.forward": 3.0},
    )
    assert snap["root.train"].min == pytest.approx(1.1)
    assert [s for s in cap.span_tree() if s["name"] == "data"] == [
        {
            "name": "data",
            "path": "root.train.data",
            "step": step,
            "parent": "train",
            "start": start,
            "end": end,
            "status": "UNSET",
        }
        for step, (start, end) in [
            (0, (0.0, 0.1)),
            (1, (1.1, 1.3)),
            (2, (2.3, 2.6)),
            (2, (3.6, 4.1)),
        ]
    ]


def test_the_section_name_is_chosen_and_checked_at_the_call(cap: Capture) -> None:
    """`section=` names the fetch; a bad name raises TimerError before anything is fetched."""
    train = cap.lt.timer("train")
    with pytest.raises(looptrace.TimerError, match=r"'load\.batch' contains"):
        train.iterate(Loader(cap.clock, [0.1]), section="load.batch")
    assert list(train.iterate(Loader(cap.clock, [0.1]), section="load")) == [0]
    assert counts(cap.lt.reset()) == {"root.train": 1, "root.train.load": 2}  # and the end


def test_an_iterable_without_length_ends_with_an_item_less_lap(cap: Capture) -> None:
    """Without len() the fetch that finds the end starts one more lap, which ends at once."""
    train = cap.lt.timer("train")
    for _ in train.iterate(unsized(cap.clock, [0.1, 0.2])):
        cap.clock.advance(1.0)
    snap = cap.lt.reset()
    assert (counts(snap), totals(snap)) == (
        {"root.train": 3, "root.train.data": 3},
        {"root.train": 2.8, "root.train.data": 0.8},
    )


@pytest.mark.parametrize(("length", "laps"), [(1, 4), (5, 4)])
def test_a_wrong_length_still_yields_every_item(cap: Capture, length: int, laps: int) -> None:
    """A len() that is wrong either way falls back to the unsized behaviour: one more lap."""
    train = cap.lt.timer("train")
    items = list(train.iterate(Loader(cap.clock, [0.1, 0.2, 0.3], length=length)))
    assert (items, counts(cap.lt.reset())["root.train"], train.running) == ([0, 1, 2], laps, False)


def test_break_ends_the_lap_when_the_iterator_closes(cap: Capture) -> None:
    """Leaving the loop early ends the running lap at close(), not at the next reset."""
    train = cap.lt.timer("train")
    batches = train.iterate(Loader(cap.clock, [0.1, 0.2, 0.3]))
    for batch in batches:
        cap.clock.advance(1.0)
        if batch == 1:
            break
    assert train.running
    batches.close()
    cap.clock.advance(5.0)
    snap = cap.lt.reset()
    assert (train.running, counts(snap), totals(snap)) == (
        False,
        {"root.train": 2, "root.train.data": 2},
        {"root.train": 2.3, "root.train.data": 0.3},
    )


def _loop_with_break(train: looptrace.Timer, clock: FakeClock) -> None:
    for batch in train.iterate(Loader(clock, [0.1, 0.2, 0.3, 0.4])):
        clock.advance(1.0)
        if batch == 1:
            break


def _loop_with_enumerate(train: looptrace.Timer, clock: FakeClock) -> None:
    for step, _ in enumerate(train.iterate(Loader(clock, [0.1, 0.2, 0.3, 0.4]))):
        clock.advance(1.0)
        if step >= 1:
            break


def _loop_with_zip(train: looptrace.Timer, clock: FakeClock) -> None:
    for _ in zip(range(2), train.iterate(Loader(clock, [0.1, 0.2, 0.3, 0.4])), strict=False):
        clock.advance(1.0)


def _loop_with_an_error(train: looptrace.Timer, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="bad batch"):
        for batch in train.iterate(Loader(clock, [0.1, 0.2, 0.3, 0.4])):
            clock.advance(1.0)
            if batch == 1:
                raise ValueError("bad batch")


def _iterator_dropped(train: looptrace.Timer, clock: FakeClock) -> None:
    batches = train.iterate(Loader(clock, [0.1, 0.2, 0.3, 0.4]))
    for _ in range(2):
        next(batches)
        clock.advance(1.0)
    del batches


@pytest.mark.parametrize(
    "loop",
    [
        _loop_with_break,
        _loop_with_enumerate,
        _loop_with_zip,
        _loop_with_an_error,
        _iterator_dropped,
    ],
)
def test_leaving_the_loop_early_ends_the_lap_there(cap: Capture, loop: object) -> None:
    """break, enumerate, zip, an error or a dropped iterator end the lap at once, no close()."""
    train = cap.lt.timer("train")
    assert callable(loop)
    loop(train, cap.clock)
    assert not train.running
    cap.clock.advance(5.0)  # after the loop: in no lap
    snap = cap.lt.reset()
    assert (counts(snap), totals(snap)) == (
        {"root.train": 2, "root.train.data": 2},
        {"root.train": 2.3, "root.train.data": 0.3},
    )


def test_the_first_lap_times_the_start_of_the_iteration(cap: Capture) -> None:
    """`iter(loader)` (worker start-up) is in the first lap's `data`, again in each epoch."""
    train = cap.lt.timer("train")
    loader = Loader(cap.clock, [0.1, 0.2], start_s=0.125)
    for _ in range(2):  # two epochs: each starts its workers again
        for _ in train.iterate(loader):
            cap.clock.advance(1.0)
    snap = cap.lt.reset()
    assert (counts(snap), totals(snap)) == (
        {"root.train": 4, "root.train.data": 6},
        {"root.train": 5.85, "root.train.data": 1.85},
    )
    assert [round(s["end"] - s["start"], 9) for s in cap.span_tree() if s["name"] == "data"] == [
        0.225,
        0.2,
        0.5,  # finding the end of the first epoch, in its last lap
        0.225,
        0.2,
        0.5,
    ]


def test_a_failing_start_ends_the_first_fetch_with_an_error(cap: Capture) -> None:
    """An `iter()` that raises (workers that cannot start) is the first lap's failed fetch."""

    class Broken:
        def __iter__(self) -> Iterator[int]:
            cap.clock.advance(0.25)
            raise OSError("worker failed to start")

    train = cap.lt.timer("train")
    with pytest.raises(OSError, match="worker failed"):
        list(train.iterate(Broken()))
    snap = cap.lt.reset()
    assert (train.running, counts(snap), totals(snap), snap["root.train.data"].errors) == (
        False,
        {"root.train": 1, "root.train.data": 1},
        {"root.train": 0.25, "root.train.data": 0.25},
        1,
    )


def test_a_failing_fetch_ends_its_section_with_an_error_and_the_lap(cap: Capture) -> None:
    """An exception from the loader marks `data` ERROR, stops the timer and propagates."""

    def failing() -> Iterator[int]:
        yield 0
        cap.clock.advance(0.25)
        raise OSError("worker died")

    train = cap.lt.timer("train")
    with pytest.raises(OSError, match="worker died"):
        for _ in train.iterate(failing()):
            cap.clock.advance(1.0)
    snap = cap.lt.reset()
    assert (train.running, counts(snap), snap["root.train.data"].errors) == (
        False,
        {"root.train": 2, "root.train.data": 2},
        1,
    )
    assert [s["status"] for s in cap.span_tree() if s["name"] == "data"] == ["UNSET", "ERROR"]


def test_a_torch_dataloader_gives_a_lap_per_batch_and_times_its_loading(cap: Capture) -> None:
    """A real DataLoader: len(loader) laps; each batch's __getitem__ time is in `data`."""
    torch_data = pytest.importorskip("torch.utils.data")
    clock = cap.clock

    class Slow(torch_data.Dataset):  # type: ignore[misc, name-defined]
        def __len__(self) -> int:
            return 10

        def __getitem__(self, index: int) -> int:
            clock.advance(0.01)
            return index

    loader = torch_data.DataLoader(Slow(), batch_size=4)  # batches of 4, 4 and 2
    train = cap.lt.timer("train")
    sizes = []
    for batch in train.iterate(loader):
        sizes.append(len(batch))
        train.record("forward")
        clock.advance(0.5)
    snap = cap.lt.reset()
    assert (sizes, counts(snap), totals(snap)) == (
        [4, 4, 2],
        {"root.train": 3, "root.train.data": 4, "root.train.forward": 3},
        {"root.train": 1.6, "root.train.data": 0.1, "root.train.forward": 1.5},
    )
    assert [round(s["end"] - s["start"], 9) for s in cap.span_tree() if s["name"] == "data"] == [
        0.04,
        0.04,
        0.02,
        0.0,  # the fetch that finds the end (it shuts the workers down), in the last lap
    ]


def test_an_iterable_whose_len_fails_raises_at_the_first_fetch(cap: Capture) -> None:
    """A len() that raises (not TypeError) propagates from the first next(), nothing started."""

    class Broken:
        def __len__(self) -> int:
            raise RuntimeError("no length")

        def __iter__(self) -> Iterator[int]:
            return iter([1])

    train = cap.lt.timer("train")
    with pytest.raises(RuntimeError, match="no length"):
        next(train.iterate(Broken()))
    gc.collect()
    assert (train.running, counts(cap.lt.reset()), cap.lt.health().misuse) == (False, {}, 0)
