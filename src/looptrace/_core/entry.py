"""A section's entry and exit as methods bound once: what each of its `with` blocks calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from looptrace._core.timer import Timer


class SectionEntry:
    """Enters and leaves section `timer` of `owner`; `section` is what `with ... as` gives.

    `with` in CPython calls `enter()` and `exit(exc_type, exc, traceback)`. The language
    reference's form of `with`, `type(m).__enter__(m)` and `type(m).__exit__(m, exc_type,
    exc, traceback)`, which mypyc-compiled code uses, passes the section first: both forms
    are accepted.
    """

    __slots__ = ("owner", "section", "timer")

    def __init__(self, owner: Timer, timer: Timer) -> None:
        self.owner = owner
        self.timer = timer
        self.section: object = None

    def enter(self, manager: object = None) -> object:
        """Enter the section in the calling thread or task; return `section`.

        Called as `enter()` or `enter(section)`.
        """
        self.owner._enter(self.timer, hold=True)
        return self.section

    def exit(self, first: object, second: object, third: object, fourth: object = None) -> None:
        """Leave the section entered last by the calling thread or task, failed by an error.

        Called as `exit(exc_type, exc, traceback)` or `exit(section, exc_type, exc, traceback)`.
        """
        error = third if first is self.section else second
        if error is None:  # (isinstance() of None looks up its __class__: kept off this path)
            self.owner._exit(self.timer, None, None)
        else:
            self.owner._exit(self.timer, None, error if isinstance(error, BaseException) else None)
