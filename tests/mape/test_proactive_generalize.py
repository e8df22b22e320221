"""The rules that make the foresail policy hold on loads it was not tuned for: the forecast's upper bound
in the near term, the surge rule (also inside stabilization) and the cost of a scale-in."""

from __future__ import annotations

import dataclasses

import numpy as np

from mape.knowledge import Knowledge
from mape.plan import GuardedPlan
from mape.proactive import ProactivePolicy
from messages.types import Assessment

PER_WORKER_RPS = 10_000.0
NOW_S = 10_000.0


def _assessment(average: float, forecast: float | np.ndarray, current: int = 4, **fields) -> Assessment:
    capacities = {n: n * PER_WORKER_RPS for n in range(1, 13)}
    if not isinstance(forecast, np.ndarray):
        forecast = np.full(900, float(forecast))
    return Assessment(
        time_s=NOW_S,
        current_scaleout=current,
        workload_avg_rps=average,
        workload_max_rps=average,
        backlog_records=fields.pop("backlog", 0.0),
        capacities_rps=capacities,
        capacity_sources=dict.fromkeys(capacities, "extrapolated"),
        forecast_rps=forecast,
        recovery_s=dict.fromkeys(capacities, 60.0),
        **fields,
    )


def _policy() -> ProactivePolicy:
    return ProactivePolicy(1, 12, recovery_target_s=600.0, loop_interval_s=60.0)


def _knowledge(rescaled_ago_s: float | None = None) -> Knowledge:
    return Knowledge(last_rescale_s=None if rescaled_ago_s is None else NOW_S - rescaled_ago_s)


def test_the_near_term_is_planned_on_the_upper_bound_not_the_mean():
    # mean 35k is carried by 4 workers; the upper bound says 45k may come within the recovery: 5
    a = _assessment(35_000, 35_000, current=4, forecast_upper_rps=np.full(900, 45_000.0))
    target, rule, _ = _policy().propose(a, _knowledge())
    assert target == 5 and rule == "long-lived"
    assert _policy().propose(dataclasses.replace(a, forecast_upper_rps=None), _knowledge())[0] == 4


def test_a_surge_outside_the_forecast_interval_scales_out_to_carry_it_and_its_backlog():
    # the last seconds run at 62k; the previous forecast allowed 41k; 4 workers carry 40k
    a = _assessment(45_000, 40_000, current=4, workload_recent_rps=62_000.0, expected_upper_rps=41_000.0)
    target, rule, reasons = _policy().propose(a, _knowledge())
    assert rule == "surge"
    # 62k plus what piles up during a 30 s restart (and half a checkpoint) drained within 120 s
    needed = 62_000 + 62_000 * (30 + 5) / 120
    assert target == int(np.ceil(needed / PER_WORKER_RPS))
    assert "62000" in reasons[0]


def test_on_flink_2_a_surge_counts_no_replay_for_its_scale_out():
    """recovery.scale_out_at_checkpoint: the scale-out restarts from a checkpoint that just completed
    (FLIP-461), so only the 30 s restart piles up: 62k + 62k × 30 / 120 = 77.5k rps needs 8 workers, not the
    80.1k (9) of a restart that also replays half a checkpoint interval."""
    a = _assessment(45_000, 40_000, current=4, workload_recent_rps=62_000.0, expected_upper_rps=41_000.0)
    at_checkpoint = ProactivePolicy(1, 12, 600.0, 60.0, scale_out_at_checkpoint=True)
    target, rule, _ = at_checkpoint.propose(a, _knowledge())
    assert rule == "surge" and target == int(np.ceil((62_000 + 62_000 * 30 / 120) / PER_WORKER_RPS)) == 8
    assert _policy().propose(a, _knowledge())[0] == 9


def test_a_surge_is_sized_on_the_newest_sample_when_the_mean_still_holds_the_level_before_a_step():
    # the last 15 s average 45k (20k, 55k, 60k); the newest sample says 60k arrive now
    a = _assessment(
        30_000,
        20_000,
        current=4,
        workload_recent_rps=45_000.0,
        workload_latest_rps=60_000.0,
        expected_upper_rps=21_000.0,
    )
    target, rule, _ = _policy().propose(a, _knowledge())
    assert rule == "surge"
    assert target == int(np.ceil((60_000 + 60_000 * (30 + 5) / 120) / PER_WORKER_RPS))
    # a newest sample below the mean (the surge ebbs) does not lower the size
    ebbing = dataclasses.replace(a, workload_latest_rps=30_000.0)
    assert _policy().propose(ebbing, _knowledge())[0] == int(
        np.ceil((45_000 * (1 + 35 / 120)) / PER_WORKER_RPS)
    )


def test_a_surge_that_the_forecast_foresaw_is_left_to_the_regular_rules():
    a = _assessment(45_000, 63_000, current=4, workload_recent_rps=62_000.0, expected_upper_rps=66_000.0)
    _, rule, _ = _policy().propose(a, _knowledge())
    assert rule != "surge"


def test_a_surge_overrides_stabilization_but_nothing_else_does():
    plan = GuardedPlan(_policy(), 1, 12, stabilization_s=180.0)
    surge = _assessment(45_000, 40_000, current=4, workload_recent_rps=62_000.0, expected_upper_rps=41_000.0)
    decision = plan.decide(surge, _knowledge(rescaled_ago_s=60))
    assert decision.rule == "surge" and decision.target_scaleout > 4
    assert "inside stabilization" in decision.reasons[-1]
    calm = _assessment(20_000, 20_000, current=4, workload_recent_rps=21_000.0, expected_upper_rps=25_000.0)
    assert plan.decide(calm, _knowledge(rescaled_ago_s=60)).rule == "stabilization"


def test_a_scale_in_that_the_load_soon_undoes_is_not_worth_its_restarts():
    # 3 workers carry the load now, but the forecast passes 30k after 200 s: saving 200 worker-s does
    # not pay for a restart in and another out
    forecast = np.r_[np.full(200, 25_000.0), np.full(700, 38_000.0)]
    a = _assessment(25_000, forecast, current=4)
    target, rule, reasons = _policy().propose(a, _knowledge())
    assert (target, rule) == (4, "rescale-not-worth-it")
    assert any("and back out" in r for r in reasons)


def test_a_scale_in_that_stays_valid_for_the_horizon_is_taken():
    a = _assessment(15_000, 15_000, current=6, forecast_upper_rps=np.full(900, 17_000.0))
    target, rule, _ = _policy().propose(a, _knowledge())
    assert (target, rule) == (2, "long-lived")


def test_a_small_saving_is_not_worth_a_restart():
    # 4 → 3 saves one worker for the horizon (900 worker-s); the restart of 3 workers and the replay of
    # the load at 29k cost more when the downtime is long
    k = _knowledge()
    k.downtime.initial_s["in"] = 200.0
    a = _assessment(29_000, 29_000, current=4, forecast_upper_rps=np.full(900, 29_500.0))
    target, rule, _ = _policy().propose(a, k)
    assert (target, rule) == (4, "rescale-not-worth-it")


def _rescaled_at(*ago_s: float) -> Knowledge:
    knowledge = _knowledge()
    for ago in sorted(ago_s, reverse=True):
        knowledge.record_rescale(NOW_S - ago, 4)
    return knowledge


def test_a_scale_in_waits_while_the_last_hour_holds_the_rescale_budget_less_one():
    # the scale-in of test_a_scale_in_that_stays_valid_for_the_horizon_is_taken, with a budget of 3 an hour
    a = _assessment(15_000, 15_000, current=6, forecast_upper_rps=np.full(900, 17_000.0))
    budget = _policy()
    budget.max_rescales_per_h = 3.0
    target, rule, reasons = budget.propose(a, _rescaled_at(3_000, 1_200))
    assert (target, rule) == (6, "rescale-budget")
    assert any("2 rescales in the last hour of 3" in r for r in reasons)
    assert budget.propose(a, _rescaled_at(4_000, 1_200))[:2] == (2, "long-lived")  # one left the hour
    assert _policy().propose(a, _rescaled_at(3_000, 1_200))[:2] == (2, "long-lived")  # no budget


def test_the_rescale_budget_never_holds_a_scale_out():
    budget = _policy()
    budget.max_rescales_per_h = 3.0
    rise = _assessment(30_000, np.linspace(30_000, 75_000, 900), current=3)
    target, rule, _ = budget.propose(rise, _rescaled_at(3_000, 2_000, 1_200))
    assert target > 3 and rule == "long-lived"


def test_sized_for_the_upper_bound_a_scale_out_on_a_rising_load_carries_the_bound_scale_ins_do_not():
    # the forecast rises to 55k within the horizon, its upper bound to 75k; 4 workers carry 40k today
    rise = np.linspace(40_000, 55_000, 900)
    a = _assessment(40_000, rise, current=4, forecast_upper_rps=rise * 75 / 55)
    assert _policy().propose(a, _knowledge())[:2] == (6, "long-lived")  # carries the forecast's 55k
    upper = ProactivePolicy(1, 12, recovery_target_s=600.0, loop_interval_s=60.0, scale_out_to_upper=True)
    target, rule, reasons = upper.propose(a, _knowledge())
    assert (target, rule) == (8, "long-lived") and any("upper bound 75000 rps" in r for r in reasons)
    # a scale-in still sizes for the forecast (15k): 2 workers, though the bound reaches 25k later on
    bound = np.concatenate([np.full(120, 17_000.0), np.full(780, 25_000.0)])
    calm = _assessment(15_000, 15_000, current=6, forecast_upper_rps=bound)
    assert upper.propose(calm, _rescaled_at(3_000, 1_200))[:2] == (2, "long-lived")
