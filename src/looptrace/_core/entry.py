"""A section's entry and exit as methods bound once: what each of its `with` blocks calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from looptrace._core import ranges as _ranges
from looptrace._core.calls import ENTER, EXIT, begin
from looptrace._core.engine import count_ended, reuse
from looptrace._core.intervals import Interval, discard

if TYPE_CHECKING:
    from looptrace._core.intervals import NodeState, ThreadState
    from looptrace._core.timer import Timer


class SectionEntry:
    """Enters and leaves section `timer` of `owner`; `section` is what `with ... as` gives.

    `with` in CPython calls `enter()` and `exit(exc_type, exc, traceback)`. The language
    reference's form of `with`, `type(m).__enter__(m)` and `type(m).__exit__(m, exc_type,
    exc, traceback)`, which mypyc-compiled code uses, passes the section first: both forms
    are accepted.

    The entry of a loop's section, from the thread that ran last, inside a running untraced
    owner, takes no other call: the section's spare interval restarts in place, and its exit
    ends it in place; so do a never-lapped owner's step and its section (request handling).
    Anything else goes the general way (`Timer._entered`, `Timer._left`), with the same
    result. Both begin as every timer call does (`calls.begin`).
    """

    __slots__ = ("owner", "section", "timer")

    def __init__(self, owner: Timer, timer: Timer) -> None:
        self.owner = owner
        self.timer = timer
        self.section: object = None

    def enter(self, manager: object = None) -> object:
        """Enter the section in the calling thread or task; return `section`.

        Called as `enter()` or `enter(section)`. In place (`Engine.in_place`), from the thread
        that ran last: the section's spare interval restarts as the child of the owner's
        running untraced interval (the common entry of a loop), or of a new step of a
        never-lapped owner (`_step_in_place`). Anything else, and all of it with the in-place
        paths off, is `Timer._entered`: the same result.
        """
        owner = self.owner
        engine = owner._engine
        timer = self.timer
        found, now, was = begin(engine, timer, ENTER)
        if found is None:
            return self.section
        state = found  # (of its type: compiled, no check at each use)
        try:
            node = timer.mine
            mine = owner.mine
            if (
                was
                or node is None
                or mine is None
                or node.owner is not state
                or mine.owner is not state
                or node.stack
                or not engine.in_place
                or _ranges.active()
            ):
                owner._entered(state, timer, now, hold=True)
            elif not mine.stack:  # the owner does not run: a step of its own, if never lapped
                if not self._step_in_place(state, now):
                    owner._entered(state, timer, now, hold=True)
            else:
                current = mine.stack[-1]
                spare = node.spare
                if (
                    spare is None
                    or current.children
                    or current.span is not None
                    or current.device is not None
                ):
                    owner._entered(state, timer, now, hold=True)
                else:  # (the result of `run_owner_for()` and `start()`)
                    # Names of their own types: compiled, not checked at each use.
                    section: NodeState = node
                    interval: Interval = spare
                    section.spare = None
                    interval.parent = current  # (`Interval.restart`, held)
                    interval.start = interval.seg_start = now
                    interval.child_ns = 0
                    interval.step = current.step
                    interval.span = interval.context = interval.device = None
                    interval.held = True
                    interval.implicit = False
                    current.children.append(interval)
                    section.stack.append(interval)
                    interval.below = section.entry  # (`NodeState.push_entry`)
                    section.entry = interval
        except Exception:  # a bug of looptrace's: counted, never raised into the loop
            engine.incidents.failed("a section entry")
        finally:
            state.busy = was
        return self.section

    def _step_in_place(self, state: ThreadState, now: int) -> bool:
        """Enter the section at `now` as the only section of a new step of its idle owner.

        The entry of a never-lapped timer's section (request handling): nothing runs in the
        thread, the owner was never lapped, and its step would be untraced; the spare
        intervals restart (new ones where there are none). False (changing nothing) for
        anything else. The result is that of `run_owner_for()` (the owner's step,
        `Engine.start`) and `start()` of the section.
        """
        node = self.timer.mine
        mine = self.owner.mine
        if node is None or mine is None or mine.lapped or state.outermost:
            return False
        owner = self.owner
        if owner.device or self.timer.device:
            return False
        engine = owner._engine
        _ranges.find_profiler()
        if _ranges.active() or engine.spans.traced(owner, mine.laps):
            return False
        step = mine.spare
        if step is None:  # (the last step was traced)
            step = Interval(owner, mine, None, now, mine.next_lap(), None)
        else:
            mine.spare = None
            step.restart(None, now, mine.next_lap(), None)
        step.implicit = True
        state.outermost.append(step)
        slow = engine.slow
        if slow is not None and engine.spans.spans_read():
            slow.begin(state, step, record=True)
        mine.stack.append(step)
        spare = node.spare
        if spare is None:
            spare = Interval(self.timer, node, step, now, step.step, None)
        else:
            node.spare = None
            spare.restart(step, now, step.step, None)
        spare.held = True
        step.children.append(spare)
        node.stack.append(spare)
        node.push_entry(spare)
        return True

    def exit(  # noqa: PLR0912 - hot path, inlined
        self, first: object, second: object, third: object, fourth: object = None
    ) -> None:
        """Leave the section entered last by the calling thread or task, failed by an error.

        Called as `exit(exc_type, exc, traceback)` or `exit(section, exc_type, exc, traceback)`.
        In place (`Engine.in_place`), with no error, from the thread that entered it: an
        untraced leaf inside the owner's interval ends and stays spare for the next entry
        (the common exit of a loop), and so does the step of a never-lapped owner it alone
        made (`_step_left`). Anything else is `Timer._left`: the same result.
        """
        error = third if first is self.section else second
        owner = self.owner
        engine = owner._engine
        timer = self.timer
        found, now, was = begin(engine, timer, EXIT)
        if found is None:  # shut down: shutdown() ended the section
            return
        state = found  # (as in `enter`)
        try:
            node = timer.mine
            entry = None if node is None or node.owner is not state else node.entry
            if (
                error is not None  # (isinstance() of None looks up its __class__: kept off here)
                or was
                or entry is None
                or _ranges.OPEN
                or not engine.in_place
                or engine.closed
            ):
                failed = error if isinstance(error, BaseException) else None
                left = owner._left(state, timer, now, None, failed)
            else:
                interval: Interval = entry  # (of its type: compiled, no check at each use)
                section = interval.state  # (`node`)
                stack = section.stack
                parent = interval.parent
                if (
                    parent is None
                    or interval.children
                    or interval.span is not None
                    or interval.device is not None
                    or not stack
                    or stack[-1] is not interval  # ended by a lap inside the block
                ):
                    left = owner._left(state, timer, now, None, None)
                elif parent.implicit:
                    left = self._step_left(state, interval, parent, now) or owner._left(
                        state, timer, now, None, None
                    )
                else:  # (the result of `Engine.end()`)
                    outer: Interval = parent
                    section.entry = interval.below  # (`NodeState.pop_entry`)
                    interval.below = None
                    duration = now - interval.seg_start
                    count_ended(state, interval, now, duration, None)
                    children = outer.children
                    if children[-1] is interval:  # (`discard`)
                        children.pop()
                    else:
                        children.remove(interval)
                    outer.child_ns += duration
                    stack.pop()
                    if not timer.device:  # (`reuse`: untraced, on the host)
                        section.spare = interval
                    left = True
        except Exception:  # a bug of looptrace's: counted, never raised into the loop
            engine.incidents.failed("a section exit")
            return
        finally:
            state.busy = was
        if not left:
            owner._unmatched(timer)
        if state.fold_due:
            engine.windows.merge_pending(state)

    def _step_left(self, state: ThreadState, interval: Interval, step: Interval, now: int) -> bool:
        """End `interval`, an untraced leaf, and `step`, the owner's step it alone made, at `now`.

        False (changing nothing) when the step has other sections or is traced, or runs on
        the device. The result is that of `Engine.leave()`: both intervals stay spare.
        """
        if step.span is not None or step.device is not None or len(step.children) != 1:
            return False
        node = interval.state
        node.pop_entry()
        duration = now - interval.seg_start
        count_ended(state, interval, now, duration, None)
        step.children.pop()
        step.child_ns += duration
        node.stack.pop()
        reuse(interval)
        count_ended(state, step, now, now - step.seg_start, None)
        discard(state.outermost, step)
        engine = self.owner._engine
        slow = engine.slow
        if state.watched and slow is not None:
            slow.end(state, step, now, False)
        discard(step.state.stack, step)
        if state.device is not None and state.device.pending:
            engine.device.resolve(state, wait=False)
        reuse(step)
        return True
