"""The hang watchdog: a thread that looks at the open steps once a second and tells of a hang.

Nothing runs on the training thread: the watchdog reads every thread's open sections
(`read_open`), asks the `HangPolicy` what changed, and for a step past its threshold writes,
once, a `looptrace.hang` line to the snapshot file and one log record (ERROR, logger
`looptrace`) with the open sections of every thread and every thread's Python stack; then a
short `looptrace.hang` line with `"repeat": true` (and a WARNING) every `repeat_s` while the
step stays open, and a `looptrace.hang_cleared` line with its duration when it ends. Steps
that one look finds hung together share that record and one reading of the stacks (on the
first one's line); their repeats and ends are one WARNING per look. Between
looks it keeps `faulthandler`'s alarm aimed at the next deadline (`StackAlarm`), so a process
frozen in a C call that holds the GIL, where this thread cannot run, still writes its stacks.
At shutdown (exit, SIGTERM, Ctrl-C) with a hang standing it writes the open sections once more,
marked `"exit": true`: the sections the last window then counts as cut short.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from looptrace._core.open_sections import OpenSection, read_open
from looptrace._export.hang_policy import HangEvent, HangPolicy
from looptrace._export.records import HANG_CLEARED_KIND, HANG_KIND, SNAPSHOT_VERSION
from looptrace._export.stacks import StackAlarm, dump_stacks
from looptrace._stats.hang import StandingHang

if TYPE_CHECKING:
    from looptrace._core.engine import Engine
    from looptrace._distributed.ranks import RankInfo
    from looptrace._stats.health import Incidents
    from looptrace._stats.roles import Roles

_log = logging.getLogger("looptrace")

INTERVAL_S: Final = 1.0  # between two looks: at most one wake-up a second
GRACE_S: Final = 2.0  # `faulthandler`'s alarm fires this long after a deadline the thread missed
STOP_WAIT_S: Final = 2.0  # the longest shutdown waits for a look under way
MAX_LOGGED_SECTIONS: Final = 64  # open sections (and hung steps) named in one log record
MAX_SHORT: Final = 8  # steps named in one record of repeats or ends


class Watchdog:
    """The watchdog thread of one `Looptrace` (started by `configure()`, stopped by shutdown)."""

    def __init__(
        self,
        engine: Callable[[], Engine | None],
        policy: HangPolicy,
        *,
        rank: RankInfo,
        incidents: Incidents,
        roles: Callable[[], Roles],
        write_line: Callable[[dict[str, Any]], object] | None,
        alarm: StackAlarm,
        interval_s: float = INTERVAL_S,
        push: Callable[[], object] | None = None,
    ) -> None:
        self._engine = engine  # None once the `Looptrace` is gone (a compiled engine has no
        # weak references: the handle's is taken instead)
        self.policy = policy
        self._rank = rank
        self._incidents = incidents
        self._roles = roles
        self._write_line = write_line
        self._push = push  # asks for an OTLP metrics push (the open steps' ages), if any
        self.alarm = alarm
        self._interval_s = interval_s
        self._host = socket.gethostname()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one look at a time (the thread's, or shutdown's)
        self._thread: threading.Thread | None = None
        self._standing: dict[tuple[int, str], StandingHang] = {}  # by (thread id, timer)
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def after_in_child() -> None:  # the parent's thread, hangs and lock stay there
                watchdog = ref()
                if watchdog is not None:
                    watchdog._after_fork_in_child()

            os.register_at_fork(after_in_child=after_in_child)

    def start(self) -> None:
        """Start the thread (a daemon: it never keeps the process alive)."""
        thread = threading.Thread(target=self._run, name="looptrace-watchdog", daemon=True)
        thread.start()
        self._thread = thread

    def stop(self, *, at_exit: bool = True) -> None:
        """Stop the thread; with a hang standing and `at_exit`, write the open sections again.

        Bounded: a look still under way (a write to a stalled filesystem) is waited for
        `STOP_WAIT_S` at most; then the alarm is disarmed and no exit line written.
        """
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=STOP_WAIT_S)
        if not self._lock.acquire(timeout=STOP_WAIT_S):
            self.alarm.close()
            self._incidents.write_failed(
                "hang watchdog at shutdown",
                f"the hang watchdog's last look did not finish within {STOP_WAIT_S:g} s at "
                "shutdown (a stalled snapshot file?); the open sections were not written again",
            )
            return
        try:
            self.alarm.close()
            if at_exit and self.policy.standing():
                self._exit_line()
        except Exception:
            self._incidents.failed("the hang watchdog at shutdown")
        finally:
            self._lock.release()

    def _after_fork_in_child(self) -> None:
        """Forget the parent's watchdog: no thread, no hang standing, a fresh lock."""
        self._lock = threading.Lock()
        self._thread = None
        self._stop = threading.Event()  # (the parent's may have been held mid-wait)
        self._stop.set()
        self._standing = {}
        self.policy = HangPolicy(self.policy.factor, self.policy.floor_s, self.policy.repeat_s)

    def standing_hang(self) -> StandingHang | None:
        """Return the longest step reported hung and not seen ended, as last seen (None: none)."""
        standing = list(self._standing.values())
        return max(standing, key=lambda hang: hang.seconds) if standing else None

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            if self.look() is None:
                return

    def look(self) -> list[HangEvent] | None:
        """Look at the open steps once; report and return what changed (None: engine gone)."""
        engine = self._engine()
        if engine is None or engine.closed:
            return None
        try:
            with self._lock:
                now = engine.now()
                sections = read_open(engine.states.all(), now)
                events = self.policy.look(sections, now)
                if events:
                    self._report(events, sections, engine.anchor.epoch_ns(now))
                if events and self._push is not None:
                    self._push()
                self.alarm.arm(self.policy.deadline_ns(sections), now, GRACE_S)
        except Exception:
            self._incidents.failed("the hang watchdog")
            return []
        return events

    # -- evidence ------------------------------------------------------------------------

    def _report(self, events: list[HangEvent], sections: list[OpenSection], epoch_ns: int) -> None:
        """Write a line per event, and log what one look found in one record per kind.

        Many threads may hang at once (a pool waiting on one lock): the stacks are read and
        logged once, in one ERROR record naming every newly hung step; repeats and ends are
        one WARNING each. The first new hang's line carries the open sections and stacks.
        """
        hung = [event for event in events if event.kind == "hang"]
        stacks = ""
        if hung:
            self.alarm.disarm()  # this thread writes the stacks itself
            stacks = dump_stacks()
            _log.error("%s", _hang_message(self._rank.rank, hung, sections, stacks))
        told = False
        for event in events:
            self._stand(event, sections)
            record = self._base(event.kind, epoch_ns)
            record.update(
                timer=event.path,
                thread=event.thread_name,
                step=event.step,
                seconds=round(event.seconds, 3),
                threshold_s=round(event.threshold_s, 3),
            )
            if event.kind == "hang" and not told:
                record["open"] = self._open(sections)
                record["stacks"] = stacks
                told = True
            elif event.kind != "cleared":
                if event.kind == "repeat":
                    record["repeat"] = True
                record["innermost"] = _innermost(sections, event.thread_id)
            self._write(record)
        for kind, level in (("repeat", logging.WARNING), ("cleared", logging.WARNING)):
            told_events = [event for event in events if event.kind == kind]
            if told_events:
                _log.log(level, "%s", _short_message(self._rank.rank, kind, told_events, sections))

    def _stand(self, event: HangEvent, sections: list[OpenSection]) -> None:
        """Keep (or drop, once it ended) the event's step among the standing hangs."""
        key = (event.thread_id, event.path)
        if event.kind == "cleared":
            self._standing.pop(key, None)
            return
        inner = _innermost_section(sections, event.thread_id)
        self._standing[key] = StandingHang(
            timer=event.path,
            step=event.step,
            seconds=round(event.seconds, 3),
            threshold_s=round(event.threshold_s, 3),
            thread=event.thread_name,
            innermost=event.path if inner is None else inner.path,
            innermost_seconds=round(event.seconds if inner is None else inner.seconds, 3),
        )

    def _exit_line(self) -> None:
        engine = self._engine()
        if engine is None:
            return
        now = engine.now()
        record = self._base(HANG_KIND, engine.anchor.epoch_ns(now))
        record["exit"] = True
        record["open"] = self._open(read_open(engine.states.all(), now))
        self._write(record)

    def _base(self, kind: str, epoch_ns: int) -> dict[str, Any]:
        return {
            "kind": HANG_CLEARED_KIND if kind == "cleared" else HANG_KIND,
            "version": SNAPSHOT_VERSION,
            "time": epoch_ns / 1e9,
            "rank": self._rank.rank,
            "world_size": self._rank.world_size,
            "host": self._host,
            "pid": os.getpid(),
        }

    def _open(self, sections: list[OpenSection]) -> list[dict[str, object]]:
        roles = self._roles()
        found: list[dict[str, object]] = []
        for section in sections:
            entry = section.to_dict()
            role = roles.of(section.path)
            if role is not None:
                entry["role"] = role
            found.append(entry)
        return found

    def _write(self, record: dict[str, Any]) -> None:
        if self._write_line is not None:
            self._write_line(record)


def _innermost_section(sections: list[OpenSection], thread_id: int) -> OpenSection | None:
    """Return the innermost open section of a thread (None if none)."""
    mine = [section for section in sections if section.thread_id == thread_id]
    return max(mine, key=lambda section: section.depth) if mine else None


def _innermost(sections: list[OpenSection], thread_id: int) -> str:
    """Return the path of the innermost open section of a thread ("" if none)."""
    inner = _innermost_section(sections, thread_id)
    return "" if inner is None else inner.path


def _hang_message(
    rank: int, hung: list[HangEvent], sections: list[OpenSection], stacks: str
) -> str:
    """Return the one log record of a look's new hangs: the steps, what is open, the stacks."""
    first = hung[0]
    lines = [
        f"looptrace: rank {rank} hung: step {first.step} of {first.path} (thread "
        f"{first.thread_name}) open for {first.seconds:.1f} s, past its threshold of "
        f"{first.threshold_s:.1f} s"
        + (f", and {len(hung) - 1} more steps (below)" if len(hung) > 1 else "")
        + "; open sections:"
    ]
    for section in sections[:MAX_LOGGED_SECTIONS]:
        lines.append(
            f"  [{section.thread_name}] {'  ' * section.depth}{section.path} "
            f"(step {section.step}, {section.seconds:.1f} s)"
        )
    if len(sections) > MAX_LOGGED_SECTIONS:
        lines.append(f"  ... {len(sections) - MAX_LOGGED_SECTIONS} more")
    if len(hung) > 1:
        lines.append("Also hung:")
        lines += [f"  {_step_of(event)}" for event in hung[1:MAX_LOGGED_SECTIONS]]
        if len(hung) > MAX_LOGGED_SECTIONS:
            lines.append(f"  ... {len(hung) - MAX_LOGGED_SECTIONS} more")
    lines.append("Python stacks:" if stacks else "Python stacks: (could not be read)")
    if stacks:
        lines.append(stacks.rstrip("\n"))
    return "\n".join(lines)


def _short_message(
    rank: int, kind: str, events: list[HangEvent], sections: list[OpenSection]
) -> str:
    """Return the one log record of a look's repeats (`kind` "repeat") or ends ("cleared")."""
    if kind == "repeat":
        told = [
            f"step {e.step} of {e.path} open for {e.seconds:.0f} s, in "
            f"{_innermost(sections, e.thread_id)}"
            for e in events[:MAX_SHORT]
        ]
        head = f"looptrace: rank {rank} still stuck: "
    else:
        told = [
            f"step {e.step} of {e.path} ended after {e.seconds:.1f} s" for e in events[:MAX_SHORT]
        ]
        head = f"looptrace: rank {rank}: "
    more = f"; and {len(events) - MAX_SHORT} more" if len(events) > MAX_SHORT else ""
    tail = " (hang cleared)" if kind == "cleared" else ""
    return head + "; ".join(told) + more + tail


def _step_of(event: HangEvent) -> str:
    """Return a hung step in a few words."""
    return (
        f"step {event.step} of {event.path} (thread {event.thread_name}) open for "
        f"{event.seconds:.1f} s"
    )
