"""Following a rescale across iterations: hold while it lands, give up after the timeout, pick up one a
killed daemon left behind, recommend-only."""

from __future__ import annotations

import numpy as np
import pytest

from backends.execution import FollowedTarget, FollowingSource, NotApplied, RescaleFollower
from messages.types import Observation


class FakeTarget:
    """A target whose resources become ready when the test says so."""

    def __init__(self, desired: int | None = 2) -> None:
        self.set_to = desired
        self.resources_ready = False
        self.calls: list[int] = []

    def scale_to(self, scaleout: int, now_s: float) -> None:
        self.calls.append(scaleout)
        self.set_to = scaleout

    def desired(self) -> int | None:
        return self.set_to

    def ready(self, scaleout: int) -> bool:
        return self.resources_ready and self.set_to == scaleout


class FakeSource:
    def __init__(self) -> None:
        self.parallelism = 2

    def observe(self, now_s: float, window_s: float) -> Observation:
        return Observation(
            now_s, window_s, np.array([now_s]), np.array([100.0]), (), 0.0, self.parallelism, 600.0
        )


def _wired(target: FakeTarget, timeout_s: float = 60.0, recommend_only: bool = False):
    outcomes: list[tuple[str, float]] = []
    follower = RescaleFollower(target, timeout_s, on_outcome=lambda o, s: outcomes.append((o, s)))
    source = FakeSource()
    return (
        FollowingSource(source, follower),
        FollowedTarget(target, follower, recommend_only),
        source,
        outcomes,
    )


def test_the_loop_sees_a_problem_until_the_job_runs_at_the_new_scale_out():
    target = FakeTarget()
    source, scaled, fake, outcomes = _wired(target)
    assert source.observe(0.0, 60).problems == ()
    scaled.scale_to(4, now_s=10.0)
    assert "rescale to 4 in progress for 5 s" in source.observe(15.0, 60).problems[0]
    target.resources_ready = True  # pods up, but Flink still restarts at 2
    assert source.observe(20.0, 60).problems
    fake.parallelism = 4
    assert source.observe(25.0, 60).problems == ()
    assert outcomes == [("ready", 15.0)]


def test_a_rescale_that_never_lands_is_given_up_after_the_timeout_and_recorded():
    target = FakeTarget()
    source, scaled, _, outcomes = _wired(target, timeout_s=30.0)
    source.observe(0.0, 60)
    scaled.scale_to(3, now_s=0.0)
    assert source.observe(30.0, 60).problems
    assert source.observe(31.0, 60).problems == ()  # the loop may decide again
    assert outcomes == [("timeout", 31.0)]


def test_a_rescale_in_progress_at_start_up_is_adopted_not_repeated():
    target = FakeTarget(desired=3)  # what a daemon killed right after patching leaves: set to 3, job at 2
    source, _, fake, outcomes = _wired(target)
    assert "found at start-up" in source.observe(100.0, 60).problems[0]
    target.resources_ready, fake.parallelism = True, 3
    assert source.observe(140.0, 60).problems == ()
    assert target.calls == []
    assert outcomes == [("ready", 40.0)]


def test_nothing_is_adopted_when_the_job_runs_at_what_the_target_is_set_to():
    source, _, _, outcomes = _wired(FakeTarget(desired=2))
    assert source.observe(0.0, 60).problems == ()
    assert outcomes == []


def test_recommend_only_never_touches_the_target_nor_waits_for_anything():
    target = FakeTarget()
    source, scaled, _, _ = _wired(target, recommend_only=True)
    with pytest.raises(NotApplied):
        scaled.scale_to(5, now_s=0.0)
    assert target.calls == [] and source.observe(1.0, 60).problems == ()


def test_a_target_that_cannot_answer_is_asked_again_rather_than_trusted():
    class Unreachable(FakeTarget):
        def desired(self) -> int | None:
            raise ConnectionError("API server down")

    target = Unreachable()
    source, _, _, _ = _wired(target)
    assert source.observe(0.0, 60).problems == ()  # nothing known to be in progress: the loop decides
    assert source.follower._adopted is False  # and start-up adoption is retried next time


def test_nothing_is_adopted_while_the_job_parallelism_is_unknown():
    target = FakeTarget(desired=3)  # a restart while Prometheus is down: replicas 3, parallelism unknown
    source, _, fake, outcomes = _wired(target, timeout_s=30.0)
    fake.parallelism = None
    assert source.observe(0.0, 60).problems == ()
    assert source.observe(100.0, 60).problems == ()  # past the timeout: no rescale invented, none failed
    assert outcomes == []
    fake.parallelism = 3  # known again, and the job runs at what the target is set to
    assert source.observe(160.0, 60).problems == () and outcomes == []


def test_a_request_whose_answer_was_lost_is_followed_if_it_landed():
    class LostAnswer(FakeTarget):
        def scale_to(self, scaleout: int, now_s: float) -> None:
            super().scale_to(scaleout, now_s)  # applied by the server...
            raise TimeoutError("read timed out")  # ...but the answer never came

    target = LostAnswer()
    source, scaled, fake, outcomes = _wired(target)
    assert source.observe(0.0, 60).problems == ()
    with pytest.raises(TimeoutError):
        scaled.scale_to(5, now_s=10.0)
    assert "rescale to 5 in progress" in source.observe(70.0, 60).problems[0]
    assert "answer was lost" in source.observe(75.0, 60).problems[0]
    target.resources_ready, fake.parallelism = True, 5
    assert source.observe(100.0, 60).problems == ()
    assert [o for o, _ in outcomes] == ["ready"]


def test_a_request_that_failed_without_landing_holds_nothing():
    class Refused(FakeTarget):
        def scale_to(self, scaleout: int, now_s: float) -> None:
            raise TimeoutError("connect timed out")  # nothing reached the server

    source, scaled, _, outcomes = _wired(Refused())
    with pytest.raises(TimeoutError):
        scaled.scale_to(5, now_s=10.0)
    assert source.observe(70.0, 60).problems == () and outcomes == []
