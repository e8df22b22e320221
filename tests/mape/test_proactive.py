"""The foresail policy (Daedalus Algorithm 1): one test per rule, and its properties."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mape.knowledge import Knowledge
from mape.proactive import ProactivePolicy
from messages.types import Assessment, Decision

PER_WORKER_RPS = 10_000.0
NOW_S = 10_000.0


def _assessment(
    average: float,
    forecast: np.ndarray | float,
    current: int = 4,
    backlog: float = 0.0,
    recovery: dict[int, float] | float = 60.0,
) -> Assessment:
    capacities = {n: n * PER_WORKER_RPS for n in range(1, 13)}
    if not isinstance(forecast, np.ndarray):
        forecast = np.full(900, float(forecast))
    if not isinstance(recovery, dict):
        recovery = dict.fromkeys(capacities, float(recovery))
    return Assessment(
        time_s=NOW_S,
        current_scaleout=current,
        workload_avg_rps=average,
        workload_max_rps=average,
        backlog_records=backlog,
        capacities_rps=capacities,
        capacity_sources=dict.fromkeys(capacities, "extrapolated"),
        forecast_rps=forecast,
        recovery_s=recovery,
    )


def _policy(target_s: float = 600.0) -> ProactivePolicy:
    return ProactivePolicy(1, 12, recovery_target_s=target_s, loop_interval_s=60.0)


def _knowledge(rescaled_ago_s: float | None = None) -> Knowledge:
    return Knowledge(last_rescale_s=None if rescaled_ago_s is None else NOW_S - rescaled_ago_s)


def test_only_if_necessary_keeps_a_recent_scaleout_that_still_carries_the_load():
    # 4 workers carry 35k now and next loop; a smaller one would be valid, but we rescaled 5 min ago
    forecast = np.r_[np.full(60, 36_000.0), np.full(840, 15_000.0)]
    target, rule, _ = _policy().propose(_assessment(35_000, forecast), _knowledge(rescaled_ago_s=300))
    assert (target, rule) == (4, "only-if-necessary")


def test_only_if_necessary_expires_after_ten_minutes():
    forecast = np.r_[np.full(60, 36_000.0), np.full(840, 15_000.0)]
    target, rule, _ = _policy().propose(_assessment(35_000, forecast), _knowledge(rescaled_ago_s=601))
    assert (target, rule) == (4, "current-valid")


def _after(rule: str, before: int, after: int, ago_s: float, rates_rps: list[float]) -> Knowledge:
    """Knowledge whose last rescale, `ago_s` seconds ago, went from `before` to `after` by `rule`, and
    whose plausibility ledger saw `rates_rps` over the last 600 s (one sample per minute)."""
    knowledge = _knowledge(rescaled_ago_s=ago_s)
    knowledge.recent_decisions.append(Decision(NOW_S - ago_s, before, after, rule))
    for i, rate in enumerate(reversed(rates_rps)):
        knowledge.plausibility.samples[NOW_S - 60.0 * i] = (rate, rate, 60.0)
    return knowledge


SURGE_POLICY = ProactivePolicy(1, 12, 600.0, 60.0, necessary_window_s=1800.0, surge_level_window_s=600.0)
LEVEL = [35_000.0] * 10


def test_after_a_surge_whose_load_holds_the_drain_sized_scaleout_is_held_only_daedalus_s_window():
    # a surge took 2 workers to 6 to drain its backlog; 700 s later the load still needs more than 2 carry
    holding = _assessment(35_000, 35_000.0, current=6)
    target, rule, reasons = SURGE_POLICY.propose(holding, _after("surge", 2, 6, 700, LEVEL))
    assert (target, rule) == (4, "long-lived")
    assert any("the surge's load holds" in r for r in reasons)
    # within 600 s the hold stands, and after a planned rescale the whole window does
    assert SURGE_POLICY.propose(holding, _after("surge", 2, 6, 500, LEVEL))[:2] == (6, "only-if-necessary")
    assert SURGE_POLICY.propose(holding, _after("long-lived", 2, 6, 700, LEVEL))[:2] == (
        6,
        "only-if-necessary",
    )


def test_after_a_surge_whose_load_went_back_the_whole_window_holds():
    # a spike: the load is back under what the 2 workers before it carried; spikes recur, keep the 6
    back = _assessment(15_000, 15_000.0, current=6)
    base = [15_000.0] * 10
    assert SURGE_POLICY.propose(back, _after("surge", 2, 6, 700, base))[:2] == (6, "only-if-necessary")
    assert SURGE_POLICY.propose(back, _after("surge", 2, 6, 1801, base))[:2] == (2, "long-lived")


def test_a_spike_as_the_window_ends_does_not_pass_for_a_level():
    # the last minute and its forecast are high, but the load was mostly at its base since the surge
    spiking = _assessment(35_000, 35_000.0, current=6)
    rates = [15_000.0] * 8 + [35_000.0] * 2
    assert SURGE_POLICY.propose(spiking, _after("surge", 2, 6, 700, rates))[:2] == (6, "only-if-necessary")
    # without samples the ledger tells nothing: the whole window holds (the behaviour before this rule)
    assert SURGE_POLICY.propose(spiking, _after("surge", 2, 6, 700, []))[:2] == (6, "only-if-necessary")


def test_scales_out_ahead_of_a_forecast_rise():
    forecast = np.linspace(30_000, 75_000, 900)  # reaches 75k within the horizon
    target, rule, _ = _policy().propose(_assessment(30_000, forecast), _knowledge())
    # 4 carries 30k and is valid (holds): the long-lived check applies only to a change. With current 3
    # (30k is not carried), the smallest long-lived choice must carry the whole horizon: 8 workers.
    assert (target, rule) == (4, "current-valid")
    target, rule, _ = _policy().propose(_assessment(30_000, forecast, current=3), _knowledge())
    assert (target, rule) == (8, "long-lived")


def test_candidate_must_carry_the_forecast_until_it_has_recovered():
    # 5 workers carry the average but not the peak arriving at second 100, before its recovery at 200 s
    forecast = np.r_[np.full(100, 42_000.0), np.full(800, 55_000.0)]
    target, _, reasons = _policy().propose(
        _assessment(42_000, forecast, current=3, recovery=200.0), _knowledge()
    )
    assert target == 6
    assert any("until recovered" in r for r in reasons)


def test_recovery_target_rules_out_slow_candidates():
    recovery = {n: (900.0 if n < 7 else 100.0) for n in range(1, 13)}
    target, _, reasons = _policy().propose(
        _assessment(35_000, 35_000.0, current=3, recovery=recovery), _knowledge()
    )
    assert target == 7
    assert any("recovery 900 s > target 600 s" in r for r in reasons)


def test_a_rescale_whose_lag_stays_over_the_slo_too_long_is_passed_over():
    # 4 carries the 35k load (current 3 does not); after 4's restart the lag stays over the SLO 60 s, 5's 12 s
    catch_up = {n: (60.0 if n < 5 else 12.0) for n in range(1, 13)}
    assessment = dataclasses.replace(_assessment(35_000, 35_000.0, current=3), lag_catch_up_s=catch_up)
    policy = ProactivePolicy(1, 12, recovery_target_s=600.0, loop_interval_s=60.0, lag_catch_up_s=20.0)
    target, rule, reasons = policy.propose(assessment, _knowledge())
    assert (target, rule) == (5, "long-lived")
    assert any("4: lag over the SLO 60 s after the restart > 20 s" in r for r in reasons)
    # without the bound (no lag SLO) the smallest valid one, as in Daedalus
    assert _policy().propose(assessment, _knowledge())[0] == 4


def test_the_running_scaleout_is_never_passed_over_for_the_lag_slo():
    # no restart, no lag: the running scale-out stays valid however its (failure) catch-up looks
    assessment = dataclasses.replace(
        _assessment(35_000, 35_000.0, current=4), lag_catch_up_s=dict.fromkeys(range(1, 13), 500.0)
    )
    policy = ProactivePolicy(1, 12, recovery_target_s=600.0, loop_interval_s=60.0, lag_catch_up_s=20.0)
    assert policy.propose(assessment, _knowledge())[:2] == (4, "current-valid")


def test_does_not_scale_in_while_catching_up():
    # load dropped to 15k: 2 workers would do, but the backlog exceeds what 2 process in a loop
    assessment = _assessment(15_000, 15_000.0, current=8, backlog=2_000_000)
    target, _, reasons = _policy().propose(assessment, _knowledge())
    assert target > 2
    assert any("catching up" in r for r in reasons)
    caught_up = _assessment(15_000, 15_000.0, current=8, backlog=1_000)
    assert _policy().propose(caught_up, _knowledge())[:2] == (2, "long-lived")


def test_backlog_is_compared_in_records_not_rates():
    # 1.1M records vs 2 workers × 20k rps × 60 s = 1.2M records: caught up enough to scale in
    assessment = _assessment(15_000, 15_000.0, current=8, backlog=1_100_000)
    assert _policy().propose(assessment, _knowledge())[0] == 2


def test_a_scale_in_below_every_scaleout_measured_gives_up_at_most_its_share_of_the_running_capacity():
    # load fell to 15k at 10 workers (100k): 2 would carry it, but only 10 was ever measured
    measured_at_10 = dataclasses.replace(
        _assessment(15_000, 15_000.0, current=10),
        capacity_sources=dict.fromkeys(range(1, 13), "extrapolated") | {10: "observed"},
    )
    limited = ProactivePolicy(1, 12, 600.0, 60.0, max_scale_in_share=0.6)
    target, rule, reasons = limited.propose(measured_at_10, _knowledge())
    assert (target, rule) == (4, "long-lived")  # 4 × 10k keeps 40% of the running 100k
    assert any("gives up at most 60%" in r for r in reasons)
    assert _policy().propose(measured_at_10, _knowledge())[:2] == (2, "long-lived")  # no limit
    measured_at_2 = dataclasses.replace(
        measured_at_10, capacity_sources=measured_at_10.capacity_sources | {2: "observed"}
    )
    assert limited.propose(measured_at_2, _knowledge())[:2] == (2, "long-lived")  # 2 was seen: trusted


def test_max_scaleout_when_nothing_is_valid():
    target, rule, _ = _policy().propose(_assessment(500_000, 500_000.0), _knowledge())
    assert (target, rule) == (12, "max-scaleout")


def test_nothing_valid_stops_where_more_workers_add_no_capacity():
    # a hot key group's subtask limits the job from 9 workers on: 90k rps, 9 and 10 within 1%, 11 and
    # 12 no more (and one noisy prediction lower): the most capacity, at the fewest workers that have it
    plateau = {n: min(n, 9) * PER_WORKER_RPS for n in range(1, 13)} | {10: 90_500.0, 11: 89_000.0}
    assessment = dataclasses.replace(_assessment(500_000, 500_000.0), capacities_rps=plateau)
    target, rule, reasons = _policy().propose(assessment, _knowledge())
    assert (target, rule) == (9, "max-scaleout")
    assert "beyond 9 more workers add < 1% capacity" in reasons[0]
    # a capacity that keeps growing still sends the job to the max
    assert _policy().propose(_assessment(500_000, 500_000.0), _knowledge())[0] == 12


def test_nothing_valid_and_no_positive_capacity_keeps_the_max_scaleout():
    broken = dataclasses.replace(
        _assessment(500_000, 500_000.0), capacities_rps=dict.fromkeys(range(1, 13), -5.0)
    )
    assert _policy().propose(broken, _knowledge())[:2] == (12, "max-scaleout")


def test_unknown_capacities_and_recoveries_are_never_chosen():
    assessment = _assessment(
        25_000, 25_000.0, current=6, recovery={n: math.inf for n in range(1, 5)} | {5: 50.0}
    )
    assert _policy().propose(assessment, _knowledge())[0] == 5


loads = st.floats(min_value=1_000, max_value=130_000)


@settings(max_examples=200, deadline=None)
@given(loads, st.lists(loads, min_size=2, max_size=10), st.integers(1, 12), st.floats(0, 5e6))
def test_chosen_scaleout_carries_the_average_load_unless_it_is_the_max(average, shape, current, backlog):
    forecast = np.interp(np.arange(900), np.linspace(0, 899, len(shape)), shape)
    assessment = _assessment(average, forecast, current=current, backlog=backlog)
    target, _, _ = _policy().propose(assessment, _knowledge())
    assert target == 12 or assessment.capacity(target) > average


@settings(max_examples=200, deadline=None)
@given(
    loads,
    st.lists(loads, min_size=2, max_size=10),
    st.integers(1, 12),
    st.floats(60, 1200),
    st.floats(0, 0.5),
)
def test_a_lower_recovery_target_never_chooses_fewer_workers(average, shape, current, target_s, per_worker_s):
    forecast = np.interp(np.arange(900), np.linspace(0, 899, len(shape)), shape)
    # recovery shrinks as workers are added, like the real prediction
    recovery = {n: 30.0 + 3_000.0 * per_worker_s / n for n in range(1, 13)}
    assessment = _assessment(average, forecast, current=current, recovery=recovery)
    strict = _policy(target_s=target_s).propose(assessment, _knowledge())[0]
    lax = _policy(target_s=target_s * 2).propose(assessment, _knowledge())[0]
    assert strict >= lax


def test_predictions_are_lowered_by_the_model_s_track_record_the_running_capacity_is_not():
    # 3 workers predicted to carry 30k; at 28.5k (95%) a scale-in from 5 to 3 is taken on face value, but not
    # when predictions have been 10% too high: then 4 (40k / 1.1 = 36.4k) is the smallest that carries it
    forecast = np.full(900, 28_500.0)
    target, rule, _ = _policy().propose(_assessment(28_500, forecast, current=5), _knowledge())
    assert (target, rule) == (3, "long-lived")
    cautious = dataclasses.replace(_assessment(28_500, forecast, current=5), capacity_overestimate=1.1)
    target, rule, reasons = _policy().propose(cautious, _knowledge())
    assert (target, rule) == (4, "long-lived")
    assert any("track record" in r for r in reasons)
    # the running scale-out's capacity is measured: 3 at 28.5k stays valid whatever the track record
    running = dataclasses.replace(_assessment(28_500, forecast, current=3), capacity_overestimate=1.1)
    assert _policy().propose(running, _knowledge())[:2] == (3, "current-valid")


def test_a_recovery_time_that_is_no_number_never_makes_a_candidate_valid():
    """NaN passed `recovery > target`: a scale-in 8 → 2 on "recovery nan s", where the smallest
    scale-out whose recovery is known to meet the target is 4."""
    unknown = {n: (math.nan if n < 4 else 60.0) for n in range(1, 13)}
    target, rule, reasons = _policy().propose(
        _assessment(15_000, 15_000.0, current=8, recovery=unknown), _knowledge()
    )
    assert target == 4 and rule == "long-lived"
    assert any("recovery nan s" in r for r in reasons)


def test_a_running_capacity_of_zero_makes_no_scale_in_pay_instead_of_dividing_by_it():
    """The scale-in's cost divided by the running scale-out's rate per worker: ZeroDivisionError every
    iteration, the memory-aware policy's too."""
    assessment = _assessment(15_000, np.r_[np.full(400, 15_000.0), np.full(500, 35_000.0)], current=8)
    assessment = dataclasses.replace(assessment, capacities_rps={**assessment.capacities_rps, 8: 0.0})
    worth, why = _policy().scale_in_pays(assessment, _knowledge(), 2, assessment.forecast_rps)
    assert not worth and "costs inf" in why
