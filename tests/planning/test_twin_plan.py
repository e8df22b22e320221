"""Planning on the DAG twin, checked against the twin's ground truth (a small version of
benchmarks/plan_capacity.py: budgets ≤ 4 slots, a target above what 12 slots carry, 10 minutes)."""

import pytest

from config.schema import Config
from daemon.plan_commands import twin_testbed
from planning.estimator import EstimatorSettings, estimate_mst
from planning.explorer import ExplorerSettings
from planning.plan import make_plan, plan_from

FAST = EstimatorSettings(warmup_s=20, cooldown_s=5, ramp_s=5, observe_s=10)
MEMORY_MB = 158.0


@pytest.fixture(scope="module")
def ysb():
    return twin_testbed(Config.model_validate({"twin": {"topology": "ysb"}}))


@pytest.mark.parametrize("slots", [1, 3])
def test_the_estimator_finds_the_twins_mst(ysb, slots):
    estimate = estimate_mst(ysb, slots, MEMORY_MB, FAST)
    truth = ysb.true_mst_rps(slots, MEMORY_MB)
    assert 0.985 * truth <= estimate.mst_rps <= truth / 0.99
    reading = estimate.final
    assert [v.name for v in reading.vertices] == [v.name for v in ysb.topology.vertices]
    assert all(v.parallelism == slots for v in reading.vertices)


def test_a_plan_from_four_slots_carries_a_target_beyond_twelve(ysb):
    target = 1.01 * max(ysb.true_mst_rps(n, MEMORY_MB) for n in range(1, 13))
    explorer = ExplorerSettings(max_slots=4, max_measurements=7)
    plan = make_plan(ysb, target, explorer, FAST, max_slots=ysb.max_slots)
    assert all(e.slots <= 4 for e in plan.exploration.estimates)
    true_min = ysb.true_min_slots(target, MEMORY_MB)
    assert true_min > 12
    plain = plan_from(plan.exploration, target, explorer, max_slots=ysb.max_slots, skew_quantile=None)
    for candidate in (plan, plain):
        lag = ysb.backlog_at_rate(candidate.slots, MEMORY_MB, target, 600)
        assert lag[-300:].max() <= target  # pending stays below a second of input: sustained
        true_mst = ysb.true_mst_rps(candidate.slots, MEMORY_MB)
        assert abs(candidate.predicted_mst_rps / true_mst - 1) <= 0.15
    assert plain.slots <= 1.15 * true_min
    assert abs(plain.predicted_mst_rps / ysb.true_mst_rps(plain.slots, MEMORY_MB) - 1) <= 0.10
    assert plan.skew is not None and plan.imbalance >= 1.0


def plan_at_benchmark_scale(topology: str):
    """Issue 14's setting: budgets ≤ 8 slots for a target beyond what 40 slots carry."""
    config = Config.model_validate({"twin": {"topology": topology, "job_profile": "stateless"}})
    testbed = twin_testbed(config)
    target = 1.01 * max(testbed.true_mst_rps(n, MEMORY_MB) for n in range(1, 41))
    explorer = ExplorerSettings(max_slots=8, memory_mb=(MEMORY_MB,), seed=config.twin.seed)
    planned = make_plan(testbed, target, explorer, max_slots=testbed.max_slots, key_census=True)
    return testbed, target, explorer, planned


def assert_meets_issue_14(testbed, planned, alternative) -> None:
    """≤ 15% over the true minimum (where the alternative plan is not), MST within 10%, the target carried."""
    target = planned.target_rate_rps
    assert planned.slots <= 1.15 * testbed.true_min_slots(target, MEMORY_MB) < alternative.slots
    true_mst = testbed.true_mst_rps(planned.slots, MEMORY_MB)
    assert abs(planned.predicted_mst_rps / true_mst - 1) <= 0.10
    lag = testbed.backlog_at_rate(planned.slots, MEMORY_MB, target, 600)
    assert lag[-300:].max() <= target


def test_a_key_group_census_meets_issue_14_on_the_skewed_single_job():
    """`single`'s keyed operator has skewed key groups that runs of 1..8 subtasks see only as wide ranges:
    at 40+ slots the skew model must provision for what the ranges may hide (62 slots for a true minimum
    of 48), the census measures each group instead."""
    single, target, explorer, planned = plan_at_benchmark_scale("single")
    assert planned.census is not None and planned.census.vertices[0].parallelism == single.max_slots
    assert planned.to_dict()["key_group_census"]["key_group_shares"]
    bounded = plan_from(planned.exploration, target, explorer, max_slots=single.max_slots)
    assert_meets_issue_14(single, planned, bounded)


def test_work_that_splits_with_the_sessions_is_planned_for():
    """`session`'s window costs more per record the more sessions its subtask holds (∝ 1/n): StreamBed's
    concave surrogates through runs of 1..8 slots under-promise 40+ slots (its plan is ~30% over the
    true minimum). With the state cost fitted per vertex the plan meets issue 14's check."""
    session, target, explorer, planned = plan_at_benchmark_scale("session")
    split = {v.name: v.split_s for v in planned.state_cost.vertices}
    window = split.pop("session")
    assert window > 0 and max(split.values()) < 1e-9 * window  # the others' work does not split
    paper = plan_from(planned.exploration, target, explorer, max_slots=session.max_slots, skew_quantile=None)
    assert_meets_issue_14(session, planned, paper)
    # the per-vertex requirement (one task per slot) carries the target on the twin, DS2's from the mean
    # subtask's rate at 8 does not (it over-sizes the window and under-sizes the parser)
    for plan, carries in ((planned, True), (paper, False)):
        limits = session.true_vertex_limits_rps(plan.vertex_parallelism, plan.slots, MEMORY_MB)
        assert (min(limits[name] for name in plan.vertex_parallelism) >= target) is carries
    assert planned.vertex_parallelism["session"] < paper.vertex_parallelism["session"]
