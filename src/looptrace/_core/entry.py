"""A section's entry and exit as methods bound once: what each of its `with` blocks calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from looptrace._core import ranges as _ranges
from looptrace._core.calls import ENTER, EXIT, begin
from looptrace._core.engine import count_ended, reuse
from looptrace._core.intervals import discard

if TYPE_CHECKING:
    from looptrace._core.intervals import Interval, ThreadState
    from looptrace._core.timer import Timer


class SectionEntry:
    """Enters and leaves section `timer` of `owner`; `section` is what `with ... as` gives.

    `with` in CPython calls `enter()` and `exit(exc_type, exc, traceback)`. The language
    reference's form of `with`, `type(m).__enter__(m)` and `type(m).__exit__(m, exc_type,
    exc, traceback)`, which mypyc-compiled code uses, passes the section first: both forms
    are accepted.

    The entry of a loop's section, from the thread that ran last, inside a running untraced
    owner, takes no other call: the section's spare interval restarts in place, and its exit
    ends it in place. Anything else goes the general way (`Timer._entered`, `Timer._left`),
    with the same result. Both begin as every timer call does (`calls.begin`).
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
        owner = self.owner
        engine = owner._engine
        state, now, was = begin(engine, self.timer, ENTER)
        if state is not None:
            try:
                if was or not engine.in_place or self.enter_spare(state, now) is None:
                    owner._entered(state, self.timer, now, hold=True)
            except Exception:  # a bug of looptrace's: counted, never raised into the loop
                engine.incidents.failed("a section entry")
            finally:
                state.busy = was
        return self.section

    def enter_spare(self, state: ThreadState, now: int) -> Interval | None:
        """Restart the section's spare interval at `now` as the child of the owner's running one.

        The common entry of a loop: the owner runs untraced with no section running, and
        the section's last interval is spare (`NodeState.spare`): returns it. None (changing
        nothing) for anything else. The result is that of `run_owner_for()` and `start()`.
        """
        node = self.timer.mine
        mine = self.owner.mine
        if node is None or mine is None or node.owner is not state or mine.owner is not state:
            return None
        spare = node.spare
        stack = mine.stack
        if spare is None or not stack or node.stack or _ranges.active():
            return None
        current = stack[-1]
        if current.children or current.span is not None or current.device is not None:
            return None
        node.spare = None
        spare.restart(current, now, current.step, None)
        spare.held = True
        current.children.append(spare)
        node.stack.append(spare)
        node.push_entry(spare)
        return spare

    def exit(self, first: object, second: object, third: object, fourth: object = None) -> None:
        """Leave the section entered last by the calling thread or task, failed by an error.

        Called as `exit(exc_type, exc, traceback)` or `exit(section, exc_type, exc, traceback)`.
        """
        error = third if first is self.section else second
        owner = self.owner
        engine = owner._engine
        state, now, was = begin(engine, self.timer, EXIT)
        if state is None:  # shut down: shutdown() ended the section
            return
        try:
            if error is None:  # (isinstance() of None looks up its __class__: kept off this path)
                left = (
                    not was and engine.in_place and self.leave_in_place(state, now)
                ) or owner._left(state, self.timer, now, None, None)
            else:
                failed = error if isinstance(error, BaseException) else None
                left = owner._left(state, self.timer, now, None, failed)
        except Exception:  # a bug of looptrace's: counted, never raised into the loop
            engine.incidents.failed("a section exit")
            return
        finally:
            state.busy = was
        if not left:
            owner._unmatched(self.timer)
        if state.fold_due:
            engine.windows.merge_pending(state)

    def leave_in_place(self, state: ThreadState, now: int) -> bool:
        """End the section's latest entry at `now`, an untraced leaf inside the owner's interval.

        The common exit of a loop; False (changing nothing) for anything else. The result is
        that of `Engine.end()`, and the interval stays spare for the next entry.
        """
        node = self.timer.mine
        if node is None or node.owner is not state:
            return False
        interval = node.entry
        stack = node.stack
        if interval is None or not stack or stack[-1] is not interval:
            return False
        parent = interval.parent
        if (
            parent is None
            or parent.implicit
            or interval.children
            or interval.span is not None
            or interval.device is not None
            or _ranges.OPEN
        ):
            return False
        node.pop_entry()
        duration = now - interval.seg_start
        count_ended(state, interval, now, duration, None)
        discard(parent.children, interval)
        parent.child_ns += duration
        stack.pop()
        reuse(interval)
        return True
