"""One trace per step across ranks: ids derived from (run id, root path, lap index)."""

from __future__ import annotations

import threading

from looptrace import RankInfo
from looptrace._core.ids import step_ids
from looptrace.testing import Capture, capture


def _ranks(world: int, run_id: str | None = "run-1", **kw: object) -> list[Capture]:
    return [
        capture(rank=RankInfo(rank=r, world_size=world), run_id=run_id, **kw) for r in range(world)
    ]


def _steps(cap: Capture, steps: int) -> None:
    train = cap.lt.timer("training")
    for _ in range(steps):
        train.record("forward")
        cap.clock.advance(0.1)
        train.record()
    train.stop()


def test_every_rank_of_a_step_shares_one_trace_rooted_at_rank_0() -> None:
    """Rank 0's lap span carries the derived ids; other ranks' lap spans are its children."""
    caps = _ranks(3)
    for cap in caps:
        _steps(cap, 3)
    for step in range(3):
        trace_id, root_id = step_ids("run-1", "root.training", step)
        laps = [
            next(
                s
                for s in cap.finished_spans()
                if s.name == "training" and (s.attributes or {})["looptrace.step"] == step
            )
            for cap in caps
        ]
        assert {lap.context.trace_id for lap in laps if lap.context} == {trace_id}
        assert laps[0].context is not None and laps[0].context.span_id == root_id
        assert laps[0].parent is None
        for lap in laps[1:]:
            assert lap.parent is not None
            assert (lap.parent.span_id, lap.parent.is_remote) == (root_id, True)
        forward = [
            s
            for cap in caps
            for s in cap.finished_spans()
            if s.name == "forward" and (s.attributes or {})["looptrace.step"] == step
        ]
        assert {s.context.trace_id for s in forward if s.context} == {trace_id}


def test_ids_differ_across_steps_runs_and_paths_and_are_valid() -> None:
    """Derived ids are non-zero and distinct across steps, runs and root timers."""
    ids = {
        step_ids(run, path, lap)
        for run in ("a", "b")
        for path in ("root.t", "root.e")
        for lap in range(100)
    }
    assert len(ids) == 400
    assert len({trace_id for trace_id, _ in ids}) == 400
    assert all(0 < t < 2**128 and 0 < s < 2**64 for t, s in ids)


def test_without_a_run_id_each_lap_gets_random_ids() -> None:
    """With no run or job id, ranks do not share traces (nothing to derive them from)."""
    caps = _ranks(2, run_id=None)
    for cap in caps:
        _steps(cap, 1)
    trace_ids = [{s.context.trace_id for s in cap.finished_spans() if s.context} for cap in caps]
    assert trace_ids[0].isdisjoint(trace_ids[1])


def test_other_threads_laps_get_their_own_traces() -> None:
    """Only the main thread's laps are aligned across ranks; a worker thread's are not."""
    cap = capture(rank=RankInfo(rank=0, world_size=2), run_id="run-1")

    def work() -> None:
        _steps(cap, 1)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    (lap,) = [
        s
        for s in cap.finished_spans()
        if s.name == "training" and (s.attributes or {})["looptrace.step"] == 0
    ]
    assert lap.context is not None
    assert lap.context.trace_id != step_ids("run-1", "root.training", 0)[0]


def test_unsampled_steps_do_not_consume_pinned_ids() -> None:
    """Steps skipped by sampling leave no pinned ids behind for a later span."""
    caps = _ranks(1, trace_every=2)
    _steps(caps[0], 3)
    traced = sorted(
        (s.attributes or {})["looptrace.step"]
        for s in caps[0].finished_spans()
        if s.name == "training"
    )
    assert traced == [0, 2]
    lap2 = next(
        s
        for s in caps[0].finished_spans()
        if s.name == "training" and (s.attributes or {})["looptrace.step"] == 2
    )
    assert lap2.context is not None
    assert lap2.context.trace_id == step_ids("run-1", "root.training", 2)[0]
