"""`lt.on_reset(callback)`: every closed window handed to user code, and its removal."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

from looptrace import Snapshot
from looptrace.testing import Capture

INTEGRATIONS = Path(__file__).parents[1] / "src" / "looptrace" / "integrations"


def test_callback_gets_every_window_reset_a_timers_reset_and_the_last(cap: Capture) -> None:
    """The callback sees the snapshot reset() returns, a timer's own window, and shutdown's."""
    seen: list[Snapshot] = []
    cap.lt.on_reset(seen.append)
    train = cap.lt.timer("train")
    train.record("forward")
    cap.clock.advance(0.5)
    first = cap.lt.reset()
    cap.clock.advance(0.25)
    own = train.reset()
    cap.clock.advance(0.125)
    cap.lt.shutdown()
    assert seen[:2] == [first, own]
    assert [s.subtree for s in seen] == ["root", "root.train", "root"]
    assert [round(s["root.train"].total, 9) for s in seen] == [0.5, 0.25, 0.125]


def test_callback_runs_on_the_thread_that_closes_the_window(cap: Capture) -> None:
    """A reset() called from another thread runs the callback on that thread."""
    threads: list[int] = []
    cap.lt.on_reset(lambda _snapshot: threads.append(threading.get_ident()))
    cap.lt.reset()
    other = threading.Thread(target=cap.lt.reset)
    other.start()
    other.join(timeout=30)
    assert threads == [threading.get_ident(), other.ident]


def test_remove_stops_the_calls_and_is_idempotent(cap: Capture) -> None:
    """After `remove()` (twice) the callback is no longer called; another one still is."""
    mine: list[Snapshot] = []
    theirs: list[Snapshot] = []
    hook = cap.lt.on_reset(mine.append)
    cap.lt.on_reset(theirs.append)
    cap.lt.reset()
    assert hook.active
    hook.remove()
    hook.remove()
    assert not hook.active
    cap.lt.reset()
    assert (len(mine), len(theirs)) == (1, 2)


def test_a_callback_may_remove_itself_while_called(cap: Capture) -> None:
    """A callback that removes its own hook is called once, and the next one still runs."""
    calls: list[str] = []
    handles = []

    def once(_snapshot: Snapshot) -> None:
        calls.append("once")
        handles[0].remove()

    handles.append(cap.lt.on_reset(once))
    cap.lt.on_reset(lambda _snapshot: calls.append("always"))
    cap.lt.reset()
    cap.lt.reset()
    assert calls == ["once", "always", "always"]


def test_a_failing_callback_is_counted_and_never_reaches_reset(
    cap: Capture, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception in a callback: reset() returns, later callbacks run, one internal error."""
    after: list[Snapshot] = []

    def broken(_snapshot: Snapshot) -> None:
        raise RuntimeError("logger is down")

    cap.lt.on_reset(broken)
    cap.lt.on_reset(after.append)
    snapshot = cap.lt.reset()
    assert after == [snapshot]
    assert cap.lt.health().internal_errors == 1
    assert "logger is down" in caplog.text


def test_on_reset_refuses_what_cannot_be_called(cap: Capture) -> None:
    """A non-callable is refused at the call, naming it."""
    with pytest.raises(TypeError, match=r"on_reset\(\).*'timing'"):
        cap.lt.on_reset("timing")  # type: ignore[arg-type]


def test_internal_error_counts_a_swallowed_exception(cap: Capture) -> None:
    """`lt.internal_error(where)` from an except block counts in health().internal_errors."""
    try:
        raise ValueError("a callback's bug")
    except ValueError:
        cap.lt.internal_error("my callback")
    assert cap.lt.health().internal_errors == 1


# `self` (own state), and the host framework's objects the PyTorch instrumentation patches
_NOT_LOOPTRACE = frozenset({"self", "dataloader", "iterator"})


def _private_reaches(source: str) -> list[str]:
    """Return `x._name` accesses on anything but own state or a host's objects in a module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in _NOT_LOOPTRACE)
        ):
            found.append(f"{ast.unparse(node)} (line {node.lineno})")
    return found


def test_integrations_reach_no_private_state_of_looptrace_objects() -> None:
    """The integrations use the public API only: no `lt._outputs`, `lt._incidents` and such."""
    reaches = {
        path.name: _private_reaches(path.read_text(encoding="utf-8"))
        for path in sorted(INTEGRATIONS.glob("*.py"))
    }
    assert {name: found for name, found in reaches.items() if found} == {}
