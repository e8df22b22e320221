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
