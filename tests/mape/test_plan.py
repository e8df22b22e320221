"""Plan guards and the reactive policy, one behaviour per test."""

from __future__ import annotations

import math

from mape.knowledge import Knowledge
from mape.plan import GuardedPlan
from mape.reactive import ReactivePolicy
from messages.types import Assessment

PER_WORKER_RPS = 10_000.0


def _assessment(workload_rps: float, backlog: float = 0.0, current: int = 4, **extra) -> Assessment:
    capacities = {n: n * PER_WORKER_RPS for n in range(1, 11)}
    return Assessment(
        time_s=1_000.0,
        current_scaleout=current,
        workload_avg_rps=workload_rps,
        workload_max_rps=workload_rps,
        backlog_records=backlog,
        capacities_rps=extra.pop("capacities", capacities),
        capacity_sources={n: "extrapolated" for n in capacities},
        **extra,
    )


def _plan(stabilization_s: float = 180.0, min_scaleout: int = 1, max_scaleout: int = 10) -> GuardedPlan:
    return GuardedPlan(
        ReactivePolicy(max_scaleout, drain_time_s=100.0), min_scaleout, max_scaleout, stabilization_s
    )


def test_reactive_picks_the_smallest_scaleout_whose_capacity_exceeds_the_load():
    decision = _plan().decide(_assessment(35_000), Knowledge())
    assert decision.target_scaleout == 4
    assert decision.rule == "smallest-sufficient"
    assert decision.action == "hold"


def test_capacity_equal_to_the_load_is_not_enough():
    assert _plan().decide(_assessment(40_000), Knowledge()).target_scaleout == 5


def test_backlog_to_drain_is_added_to_the_load():
    # 35k rps + 1.5M records / 100 s = 50k rps → 6 workers
    decision = _plan().decide(_assessment(35_000, backlog=1_500_000), Knowledge())
    assert decision.target_scaleout == 6
    assert decision.action == "scale_out"


def test_headroom_multiplies_what_the_reactive_plan_needs():
    # (35k rps + 0.5M records / 100 s) × 1.25 = 50k rps → 6 workers; without headroom 40k → 5
    policy = ReactivePolicy(10, drain_time_s=100.0, headroom=0.25)
    scaleout, _, reasons = policy.propose(_assessment(35_000, backlog=500_000), Knowledge())
    assert scaleout == 6
    assert "(1 + 0.25)" in reasons[0]
    assert ReactivePolicy(10, drain_time_s=100.0).propose(_assessment(35_000, 500_000), Knowledge())[0] == 5


def test_scales_in_when_the_load_drops():
    decision = _plan().decide(_assessment(12_000, current=8), Knowledge())
    assert (decision.target_scaleout, decision.action) == (2, "scale_in")


def test_unknown_capacities_are_skipped():
    capacities = {n: (math.nan if n < 6 else n * PER_WORKER_RPS) for n in range(1, 11)}
    decision = _plan().decide(_assessment(15_000, capacities=capacities), Knowledge())
    assert decision.target_scaleout == 6


def test_max_scaleout_when_nothing_carries_the_load():
    decision = _plan().decide(_assessment(500_000), Knowledge())
    assert (decision.target_scaleout, decision.rule) == (10, "max-scaleout")


def test_min_scaleout_clamps_the_proposal():
    decision = _plan(min_scaleout=3).decide(_assessment(1_000, current=3), Knowledge())
    assert decision.target_scaleout == 3
    assert any("clamped" in reason for reason in decision.reasons)


def test_holds_during_stabilization_after_a_rescale():
    knowledge = Knowledge(last_rescale_s=1_000.0 - 179.0)
    decision = _plan().decide(_assessment(95_000), knowledge)
    assert (decision.target_scaleout, decision.rule) == (4, "stabilization")
    knowledge.last_rescale_s = 1_000.0 - 180.0
    assert _plan().decide(_assessment(95_000), knowledge).target_scaleout == 10


def test_holds_on_bad_data():
    decision = _plan().decide(_assessment(95_000, problems=("backlog unknown (None)",)), Knowledge())
    assert (decision.target_scaleout, decision.rule) == (4, "hold-bad-data")
    assert decision.reasons == ("backlog unknown (None)",)
