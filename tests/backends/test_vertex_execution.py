"""The per-vertex execute side without Flink: the requirements map, the order TaskManagers → PUT → follow →
release, the follower delivering each measured rescale once, and the loop routing a per-vertex decision
and keeping the downtimes in the knowledge store. Flink's REST API itself is exercised on real Flink in
tests/e2e/test_e2e_vertex.py."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from backends.execution import FollowedTarget, FollowingSource, NotApplied, RescaleFollower
from backends.vertex_rescale import (
    PutUnanswered,
    RequestedRescale,
    RescaleRejected,
    VertexExecution,
    new_requirements,
)
from mape.knowledge import Knowledge, KnowledgeSettings
from mape.knowledge_store import KnowledgeStore
from mape.loop import MapeLoop
from messages.types import Assessment, CompletedRescale, Decision, Observation

A, B, C = "a" * 32, "b" * 32, "c" * 32


def test_changed_vertices_get_lower_bound_one_and_the_rest_keep_their_declared_bounds():
    declared = {A: (1, 1), B: (1, 4), C: (2, 3)}
    requirements, changed = new_requirements(declared, {A: 1, B: 2, C: 3})
    assert requirements == {A: (1, 1), B: (1, 2), C: (2, 3)} and changed == [B]
    assert new_requirements(declared, {B: 6}) == ({A: (1, 1), B: (1, 6), C: (2, 3)}, [B])
    assert new_requirements(declared, {A: 1}) == (declared, [])


@pytest.mark.parametrize(
    ("targets", "message"),
    [({"d" * 32: 2}, "vertices the job does not have"), ({A: 0}, "below 1"), ({A: 2.0}, "below 1")],
)
def test_a_plan_flink_cannot_run_is_rejected_before_any_request(targets, message):
    with pytest.raises(RescaleRejected, match=message):
        new_requirements({A: (1, 1)}, targets)


class FakeRescaler:
    """Records PUTs; a requested rescale finishes when the test says so."""

    def __init__(self) -> None:
        self.requests: list[dict[str, int]] = []
        self.done: CompletedRescale | None = None

    def request(self, targets):
        self.requests.append(dict(targets))
        return RequestedRescale("job", dict(targets), 100.0, tuple(targets))

    def finished(self, rescale: RequestedRescale) -> CompletedRescale | None:
        return self.done

    job = "job"
    """The live job's id (another after the cluster was redeployed)."""

    def live_job_id(self) -> str | None:
        return self.job


class FakePool:
    def __init__(self, running: int) -> None:
        self.running = self.registered_count = running
        self.busy = 0
        """TaskManagers above the kept count that still hold tasks (not released yet)."""

    def grow_to(self, count: int) -> int:
        before, self.running = self.running, max(self.running, count)
        return before

    def registered(self) -> int:
        return self.registered_count

    def shrink_to(self, count: int) -> bool:
        self.running = max(count, count + self.busy) if self.running > count else self.running
        return self.running <= count

    remembered: tuple[int, str] | None = None
    """What a restarted daemon finds (the pool's own store: a file, an annotation)."""

    def pending_release(self) -> tuple[int, str] | None:
        return self.remembered

    def remember_release(self, count: int | None, job_id: str | None) -> None:
        self.remembered = None if count is None else (count, job_id)


def _completed(parallelism: int, finished_s: float = 103.2) -> CompletedRescale:
    return CompletedRescale(100.0, finished_s, "vertex", {A: 1, B: parallelism})


def test_a_scale_up_puts_only_once_the_new_taskmanagers_have_registered():
    rescaler, pool = FakeRescaler(), FakePool(running=1)
    execution = VertexExecution(rescaler, pool)
    execution.scale_vertices({A: 1, B: 2}, taskmanagers=2)
    assert pool.running == 2 and rescaler.requests == []  # started, not yet registered: no PUT
    assert execution.advance() is None and rescaler.requests == []
    pool.registered_count = 2
    assert execution.advance() is None and rescaler.requests == [{A: 1, B: 2}]
    rescaler.done = _completed(2)
    assert execution.advance() == _completed(2)
    assert execution.idle() and execution.advance() is None  # reported once


def test_a_scale_down_puts_at_once_and_stops_taskmanagers_only_after_the_rescale_when_free():
    rescaler, pool = FakeRescaler(), FakePool(running=3)
    pool.busy = 1  # Flink still holds tasks on one surplus TaskManager
    execution = VertexExecution(rescaler, pool)
    execution.scale_vertices({A: 1, B: 1}, taskmanagers=1)
    assert rescaler.requests == [{A: 1, B: 1}] and pool.running == 3
    execution.advance()
    assert pool.running == 3  # the job has not restarted at the new parallelism yet: nothing stopped
    rescaler.done = _completed(1)
    assert execution.advance() is not None and pool.running == 2  # the free one stopped, the busy one kept
    pool.busy = 0
    execution.advance()
    assert pool.running == 1 and execution.keep_taskmanagers is None


@pytest.mark.parametrize("stage", ["waiting for its TaskManagers", "scaled down, surplus still busy"])
def test_a_restarted_daemon_releases_the_surplus_its_predecessor_left(stage):
    """The release count lives in the pool, not in the execution object a restart loses: TaskManagers
    started for a rescale that never went out, or left by a scale-down, are still stopped when free."""
    rescaler, pool = FakeRescaler(), FakePool(running=1 if stage.startswith("waiting") else 3)
    if stage.startswith("waiting"):
        VertexExecution(rescaler, pool).scale_vertices({A: 1, B: 3}, taskmanagers=3)
        assert pool.running == 3 and rescaler.requests == []  # started, not registered: no PUT yet
        kept = 1
    else:
        pool.busy = 2
        first = VertexExecution(rescaler, pool)
        first.scale_vertices({A: 1, B: 1}, taskmanagers=1)
        rescaler.done = _completed(1)
        first.advance()
        assert pool.running == 3  # both surplus ones still hold tasks
        kept = 1
    pool.busy, rescaler.done = 0, None
    restarted = VertexExecution(FakeRescaler(), pool)  # the daemon restarted: a new execution object
    restarted.advance()
    assert pool.running == kept and pool.remembered is None  # released, and the record cleared


def test_a_release_left_for_another_job_is_dropped_not_applied_to_the_new_one():
    """The cluster was redeployed with a new job: at its start every TaskManager is free, and the old job's
    release cut it down to the old count."""
    pool = FakePool(running=6)
    pool.remembered = (2, "the job before")
    execution = VertexExecution(FakeRescaler(), pool)
    execution.advance()
    assert pool.running == 6 and pool.remembered is None and execution.keep_taskmanagers is None


def test_a_rescale_that_went_out_replaces_the_remembered_release():
    rescaler, pool = FakeRescaler(), FakePool(running=1)
    execution = VertexExecution(rescaler, pool)
    execution.scale_vertices({A: 1, B: 2}, taskmanagers=2)
    assert pool.remembered == (1, "job")  # if the daemon stops now, the new one is surplus
    pool.registered_count = 2
    execution.advance()
    assert rescaler.requests == [{A: 1, B: 2}] and pool.remembered == (2, "job")  # PUT: both are needed
    rescaler.done = _completed(2)
    execution.advance()
    assert pool.running == 2 and pool.remembered is None


def test_a_finished_rescale_is_reported_even_when_releasing_the_taskmanagers_fails():
    """The release is tried again on the next observation; the measured downtime is not lost with it."""

    class FailingPool(FakePool):
        def shrink_to(self, count: int) -> bool:
            raise ConnectionError("/taskmanagers: 503")

    rescaler, pool = FakeRescaler(), FailingPool(running=3)
    execution = VertexExecution(rescaler, pool)
    execution.scale_vertices({A: 1, B: 1}, taskmanagers=1)
    rescaler.done = _completed(1)
    assert execution.advance() == _completed(1)
    assert execution.idle() and execution.keep_taskmanagers == 1  # released later


def test_a_rescale_whose_start_failed_is_not_put_later():
    """The TaskManagers' registration could not be read: the loop records the error and follows nothing,
    so no PUT may go out behind its back on a later observation."""

    class UnreadablePool(FakePool):
        def registered(self) -> int:
            raise ConnectionError("/taskmanagers: truncated answer")

    rescaler, pool = FakeRescaler(), UnreadablePool(running=1)
    execution = VertexExecution(rescaler, pool)
    with pytest.raises(ConnectionError):
        execution.scale_vertices({A: 1, B: 2}, taskmanagers=2)
    assert execution.idle()
    pool.registered = lambda: 2
    execution.advance()
    assert rescaler.requests == [] and pool.running == 1  # and the TaskManager it started is released


class VertexTarget:
    def __init__(self, execution: VertexExecution) -> None:
        self.execution = execution
        self.calls: list[tuple[dict, int]] = []

    def scale_vertices(self, vertex_parallelism, taskmanagers: int, now_s: float) -> None:
        self.calls.append((dict(vertex_parallelism), taskmanagers))
        self.execution.scale_vertices(vertex_parallelism, taskmanagers)

    def scale_to(self, scaleout: int, now_s: float) -> None:
        raise AssertionError("a per-vertex decision must not scale the whole job")

    def desired(self) -> None:
        return None

    def ready(self, scaleout: int) -> bool:
        return False


class FakeSource:
    def observe(self, now_s: float, window_s: float) -> Observation:
        return Observation(now_s, window_s, np.array([now_s]), np.array([100.0]), (), 0.0, 1, 600.0)


def _wired(registered: int = 2, timeout_s: float = 60.0, recommend_only: bool = False):
    rescaler, pool = FakeRescaler(), FakePool(running=registered)
    target = VertexTarget(VertexExecution(rescaler, pool))
    outcomes: list[tuple[str, float]] = []
    follower = RescaleFollower(target, timeout_s, on_outcome=lambda o, s: outcomes.append((o, s)))
    return (
        FollowingSource(FakeSource(), follower),
        FollowedTarget(target, follower, recommend_only),
        rescaler,
        outcomes,
    )


def test_the_measured_rescale_rides_on_the_next_observation_once_and_the_loop_holds_until_then():
    source, target, rescaler, outcomes = _wired()
    target.scale_vertices({A: 1, B: 2}, 2, now_s=100.0)
    first = source.observe(104.0, 60)
    assert "per-vertex rescale in progress for 4 s (Flink rescaling" in first.problems[0]
    assert first.completed_rescales == ()
    rescaler.done = _completed(2, finished_s=103.2)
    done = source.observe(109.0, 60)
    assert done.problems == () and done.completed_rescales == (_completed(2, finished_s=103.2),)
    assert done.completed_rescales[0].downtime_s == pytest.approx(3.2)
    assert source.observe(114.0, 60).completed_rescales == ()
    assert outcomes == [("ready", 9.0)]


def test_a_per_vertex_rescale_that_never_lands_is_given_up_and_the_loop_may_decide_again():
    source, target, _, outcomes = _wired(registered=1, timeout_s=30.0)
    target.scale_vertices({A: 1, B: 2}, 2, now_s=0.0)  # the second TaskManager never registers
    assert "waiting for TaskManagers" in source.observe(20.0, 60).problems[0]
    given_up = source.observe(31.0, 60)
    assert given_up.problems == () and given_up.withdrawn_rescales_s == (0.0,)  # no PUT went out
    assert outcomes == [("timeout", 31.0)] and target.target.execution.idle()


def test_a_put_refused_once_the_taskmanagers_are_up_ends_the_rescale_at_once():
    source, target, rescaler, outcomes = _wired(registered=1)
    target.scale_vertices({A: 1, B: 200}, 2, now_s=0.0)
    assert source.observe(5.0, 60).problems  # waiting for the TaskManager

    def refuse(targets):
        raise RescaleRejected(
            "Flink rejected the requirements (HTTP 400, a planning bug): above max parallelism"
        )

    rescaler.request = refuse
    target.target.execution.pool.registered_count = 2
    assert source.observe(10.0, 60).problems == ()  # nothing left to follow: the loop decides again
    assert outcomes == [("failed", 10.0)]


def _refuse(error: Exception):
    def request(targets):
        raise error

    return request


@pytest.mark.parametrize(
    ("error", "running_after"),
    [
        (RescaleRejected("HTTP 400: above max parallelism"), 1),
        (PutUnanswered("PUT resource requirements failed (ReadTimeout)"), 2),  # Flink may have taken it
    ],
    ids=["refused", "unanswered"],
)
def test_the_taskmanagers_started_for_a_deferred_put_go_once_flink_refused_it(error, running_after):
    rescaler, pool = FakeRescaler(), FakePool(running=1)
    execution = VertexExecution(rescaler, pool)
    execution.scale_vertices({A: 1, B: 2}, taskmanagers=2)
    rescaler.request = _refuse(error)
    pool.registered_count = 2
    with pytest.raises(type(error)):
        execution.advance()
    assert execution.idle() and pool.running == 2
    execution.advance()
    assert pool.running == running_after and execution.keep_taskmanagers is None


def test_a_rescale_given_up_before_its_put_releases_the_taskmanagers_started_for_it():
    """Paused before the PUT, or the TaskManagers never registered: a release already pending keeps its
    own count (what the job runs on)."""
    rescaler, pool = FakeRescaler(), FakePool(running=2)
    execution = VertexExecution(rescaler, pool)
    execution.scale_vertices({A: 1, B: 4}, taskmanagers=4)
    execution.abandon()
    execution.advance()
    assert pool.running == 2 and rescaler.requests == []
    execution.keep_taskmanagers = 1
    execution.scale_vertices({A: 1, B: 4}, taskmanagers=4)
    execution.abandon()
    assert execution.keep_taskmanagers == 1


def test_recommend_only_neither_puts_nor_follows():
    source, target, rescaler, _ = _wired(recommend_only=True)
    with pytest.raises(NotApplied, match="recommend-only"):
        target.scale_vertices({A: 1, B: 2}, 2, now_s=0.0)
    assert rescaler.requests == [] and source.observe(1.0, 60).problems == ()


class FixedAnalyzer:
    extensions = ()

    def assess(self, observation: Observation, knowledge: Knowledge) -> Assessment:
        return Assessment(observation.time_s, 1, 100.0, 100.0, 0.0, {1: 200.0, 2: 400.0}, {1: "observed"})


class VertexPlan:
    def decide(self, assessment: Assessment, knowledge: Knowledge) -> Decision:
        return Decision(
            assessment.time_s, 1, 2, "raise-b", (), target_vertex_parallelism={A: 1, B: 2},
            current_vertex_parallelism={A: 1, B: 1},
        )  # fmt: skip


def _vertex_loop(tmp_path, registered: int = 1):
    source, target, rescaler, _ = _wired(registered=registered)
    store = KnowledgeStore(tmp_path / "knowledge.sqlite")
    knowledge = store.load(KnowledgeSettings())
    loop = MapeLoop(source, target, FixedAnalyzer(), VertexPlan(), knowledge, store, 60.0, 120.0)
    return loop, target, rescaler, knowledge


@pytest.mark.parametrize(
    ("error", "withdrawn"),
    [(RescaleRejected("HTTP 400"), True), (PutUnanswered("PUT failed (ReadTimeout)"), False)],
)
def test_a_rescale_that_never_reached_flink_is_not_counted_by_the_stabilization_or_the_budget(
    tmp_path, error, withdrawn
):
    """Counted when the loop executed it, the refused PUT held every decision for the stabilization window
    and spent the hour's rescale budget although nothing restarted."""
    loop, target, rescaler, knowledge = _vertex_loop(tmp_path)
    loop.knowledge.record_rescale(40.0, 1)
    assert loop.iterate(100.0).executed and knowledge.rescale_times_s == deque([40.0, 100.0])
    rescaler.request = _refuse(error)
    target.target.execution.pool.registered_count = 2
    loop.iterate(110.0)
    expected = [40.0] if withdrawn else [40.0, 100.0]
    assert list(knowledge.rescale_times_s) == expected and knowledge.last_rescale_s == expected[-1]
    loop.store.close()


def test_a_rescale_dropped_while_paused_is_not_counted_and_its_taskmanagers_go_once_acting(tmp_path):
    loop, target, _, knowledge = _vertex_loop(tmp_path)
    loop.iterate(100.0)
    target.recommend_only = True
    loop.iterate(110.0)
    assert knowledge.last_rescale_s is None and target.target.execution.pool.running == 2
    target.recommend_only = False
    target.follower.check(120.0, 1)
    assert target.target.execution.pool.running == 1
    loop.store.close()


def test_the_loop_routes_a_per_vertex_decision_and_keeps_the_measured_downtime(tmp_path):
    loop, target, rescaler, knowledge = _vertex_loop(tmp_path, registered=2)
    result = loop.iterate(100.0)
    assert result.executed and target.target.calls == [({A: 1, B: 2}, 2)]
    assert result.decision.to_dict()["target_vertex_parallelism"] == {A: 1, B: 2}
    rescaler.done = _completed(2, finished_s=103.2)
    loop.iterate(110.0)
    knowledge.close()
    loop.store.close()
    reopened = KnowledgeStore(tmp_path / "knowledge.sqlite")
    assert list(reopened.load().rescales) == [_completed(2, finished_s=103.2)]
    decisions = reopened.decisions()
    reopened.close()
    assert decisions[0].target_vertex_parallelism == {A: 1, B: 2} and decisions[0].changes_vertices


def test_a_per_vertex_target_equal_to_what_runs_changes_nothing():
    same = Decision(
        0.0, 2, 2, "hold", (), target_vertex_parallelism={A: 2}, current_vertex_parallelism={A: 2}
    )
    assert not same.changes_vertices and not same.reconfigures
    assert Decision(
        0.0, 2, 2, "x", (), target_vertex_parallelism={A: 1}, current_vertex_parallelism={A: 2}
    ).reconfigures


def test_vertex_granularity_builds_the_per_vertex_local_target(tmp_path):
    from backends.factory import make_real_backends
    from backends.localflink import LocalFlinkTarget, LocalFlinkVertexTarget
    from config.schema import Config

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "taskmanager.sh").write_text("#!/bin/sh\n")
    config = Config.model_validate(
        {"target": {"kind": "prometheus+local-flink"}, "local_flink": {"flink_home": str(tmp_path)}}
    )
    # `scaling.granularity` is issue 13 point 1's setting; until its schema is merged it is set unvalidated
    vertex = config.model_copy(
        update={"scaling": config.scaling.model_copy(update={"granularity": "vertex"})}
    )
    assert type(make_real_backends(vertex).target.target) is LocalFlinkVertexTarget
    assert type(make_real_backends(config).target.target) is LocalFlinkTarget
