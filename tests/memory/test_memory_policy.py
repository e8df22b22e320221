"""The memory-aware foresail policy: one test per branch of Justin's Algorithm 1 and of the cost choice."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mape.knowledge import Knowledge
from mape.proactive import ProactivePolicy
from memory.cost import Prices
from memory.history import OperatorDecision
from memory.knowledge import memory_of
from memory.levels import MemoryLevels
from memory.policy import RELEASE_AFTER_S, MemoryAwarePolicy, MemorySettings
from messages.types import Assessment, MemoryAssessment, OperatorState

PER_WORKER_RPS = 10_000.0
NOW_S = 10_000.0
LEVELS = MemoryLevels(158.0, 3)
NAN = math.nan


def _capacities(per_worker_rps: float = PER_WORKER_RPS) -> dict[int, float]:
    return {n: n * per_worker_rps for n in range(1, 13)}


def _assessment(
    average: float = 35_000.0,
    peak: float = 45_000.0,
    current: int = 4,
    level: int | None = 0,
    hit_rate: float = 0.5,
    latency_ns: float = 50_000.0,
    others: dict[int, dict[int, float]] | None = None,
    stateful: bool = True,
    managed_mb: float | None = None,
    backlog: float = 0.0,
    capacities: dict[int, float] | None = None,
) -> Assessment:
    """Capacity 10k rps per worker. By default 4 workers carry the present 35k but not the forecast, which
    reaches 45k before a restart would have recovered (300 s): the plan scales out to 5 ahead of it."""
    capacities = capacities or _capacities()
    others = others or {}
    operators = (OperatorState("source", False), OperatorState("lookup", stateful, hit_rate, 1e4, latency_ns))
    memory = MemoryAssessment(
        level=level,
        managed_mb=LEVELS.managed_mb(level) if managed_mb is None else managed_mb,
        stateful=stateful,
        operators=operators,
        capacities_by_level=others,
        recovery_by_level={x: dict.fromkeys(c, 300.0) for x, c in others.items()},
    )
    return Assessment(
        time_s=NOW_S,
        current_scaleout=current,
        workload_avg_rps=average,
        workload_max_rps=average,
        backlog_records=backlog,
        capacities_rps=capacities,
        capacity_sources=dict.fromkeys(capacities, "observed"),
        forecast_rps=np.interp(
            np.arange(900), [0, 200, 899], [average, max(peak, average), max(peak, average)]
        ),
        recovery_s=dict.fromkeys(capacities, 300.0),
        memory=memory,
    )


def _policy(**settings_) -> MemoryAwarePolicy:
    cpu = ProactivePolicy(1, 12, recovery_target_s=600.0, loop_interval_s=60.0)
    return MemoryAwarePolicy(cpu, LEVELS, Prices(), MemorySettings(**settings_))


def _knowledge(last: OperatorDecision | None = None) -> Knowledge:
    knowledge = Knowledge()
    memory_of(knowledge).history.stateful = {"lookup"}
    if last is not None:
        memory_of(knowledge).history.last["lookup"] = last
    return knowledge


def _scaled_up(
    from_level: int = 0, to_level: int = 1, hit_rate: float = 0.5, latency_ns: float = NAN
) -> OperatorDecision:
    return OperatorDecision(
        "lookup", NOW_S - 600, 4, 4, from_level, to_level, "memory-up", hit_rate, latency_ns
    )


def _scaled_out(level: int = 0) -> OperatorDecision:
    return OperatorDecision("lookup", NOW_S - 600, 3, 4, level, level, "long-lived", 0.5, NAN)


def test_without_a_memory_view_the_cpu_plan_stands():
    assessment = _assessment()
    assessment = Assessment(**{**assessment.__dict__, "memory": None})
    proposal = _policy().propose_configuration(assessment, _knowledge())
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb) == (5, "long-lived", None)


# ---- stateless -----------------------------------------------------------------------------------
def test_a_stateless_job_releases_its_managed_memory_when_it_scales_out_anyway():
    knowledge = Knowledge()
    memory_of(knowledge).stateless_since_s = NOW_S - RELEASE_AFTER_S  # its state queries answered: no state
    proposal = _policy().propose_configuration(_assessment(stateful=False), knowledge)
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb) == (5, "long-lived", 0.0)
    assert proposal.memory_level is None


def test_a_cold_start_releases_with_its_first_scale_out_at_its_second_window():
    """A job started below its load scales out at its second window (the first knows no capacity); with
    that its only restart under a steady load, a release gated on five windows never came."""
    knowledge = Knowledge()
    memory_of(knowledge).stateless_since_s = NOW_S  # this window is the first without state
    assert _policy().propose_configuration(_assessment(stateful=False), knowledge).managed_mb is None
    memory_of(knowledge).stateless_since_s = NOW_S - 60.0  # the second of a 60-s loop
    assert _policy().propose_configuration(_assessment(stateful=False), knowledge).managed_mb == 0.0


def test_a_stateless_job_never_restarts_for_memory_alone():
    holding = _assessment(peak=35_000.0, stateful=False)  # 4 workers carry 35k: hold
    assert _policy().propose_configuration(holding, Knowledge()).managed_mb is None
    scaling_in = _assessment(average=15_000.0, peak=15_000.0, stateful=False)
    proposal = _policy().propose_configuration(scaling_in, Knowledge())
    assert proposal.scaleout == 2 and proposal.managed_mb is None


def test_a_stateless_job_without_managed_memory_or_with_release_off_keeps_its_memory():
    assert (
        _policy().propose_configuration(_assessment(stateful=False, managed_mb=0.0), Knowledge()).managed_mb
        is None
    )
    kept = _policy(release_stateless=False).propose_configuration(_assessment(stateful=False), Knowledge())
    assert kept.managed_mb is None


loads = st.floats(min_value=1_000, max_value=130_000)


@settings(max_examples=100, deadline=None)
@given(loads, loads, st.integers(1, 12), st.floats(0, 5e6))
def test_a_stateless_job_gets_exactly_the_cpu_only_scaleout(average, peak, current, backlog):
    assessment = _assessment(average=average, peak=peak, current=current, stateful=False, backlog=backlog)
    cpu = ProactivePolicy(1, 12, recovery_target_s=600.0, loop_interval_s=60.0)
    assert _policy().propose(assessment, Knowledge())[:2] == cpu.propose(assessment, Knowledge())[:2]


# ---- stateful: when the memory policy stays out -----------------------------------------------------
def test_missing_signals_leave_a_cpu_only_decision():
    proposal = _policy().propose_configuration(_assessment(hit_rate=NAN, latency_ns=NAN), _knowledge())
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb) == (5, "long-lived", None)
    assert any("signals missing" in r for r in proposal.reasons)


def test_a_stateful_job_without_a_memory_level_goes_back_to_level_0():
    proposal = _policy().propose_configuration(_assessment(level=None, managed_mb=0.0), _knowledge())
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb, proposal.memory_level) == (
        5,
        "memory-restore",
        158.0,
        0,
    )


def test_rescale_only_if_necessary_also_holds_the_memory():
    knowledge = _knowledge()
    knowledge.last_rescale_s = NOW_S - 300
    proposal = _policy().propose_configuration(_assessment(peak=35_000.0), knowledge)
    assert (proposal.rule, proposal.managed_mb) == ("only-if-necessary", None)


def test_no_scaleout_wanted_no_memory_step_even_under_pressure():
    proposal = _policy().propose_configuration(_assessment(peak=35_000.0, hit_rate=0.2), _knowledge())
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb) == (4, "current-valid", None)


# ---- Justin: scale up instead of out --------------------------------------------------------------
def test_a_low_hit_rate_turns_the_scale_out_into_a_scale_up():
    proposal = _policy().propose_configuration(_assessment(hit_rate=0.79), _knowledge())
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb, proposal.memory_level) == (
        4,
        "memory-up",
        316.0,
        1,
    )


def test_a_slow_state_access_is_pressure_too():
    proposal = _policy().propose_configuration(_assessment(hit_rate=0.95, latency_ns=1.5e6), _knowledge())
    assert (proposal.rule, proposal.memory_level) == ("memory-up", 1)


def test_no_pressure_means_scaling_out_as_planned():
    proposal = _policy().propose_configuration(_assessment(hit_rate=0.8, latency_ns=9e5), _knowledge())
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb) == (5, "long-lived", None)


def test_zero_reads_is_no_pressure_from_the_cache():
    proposal = _policy().propose_configuration(_assessment(hit_rate=NAN, latency_ns=3_000.0), _knowledge())
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb) == (5, "long-lived", None)


def test_at_the_highest_level_the_scale_out_goes_ahead():
    proposal = _policy().propose_configuration(_assessment(level=3, hit_rate=0.3), _knowledge())
    assert (proposal.scaleout, proposal.managed_mb) == (5, None)


def test_a_job_that_falls_behind_gets_the_workers_it_needs_with_its_scale_up():
    # 45k arrive now and 4 workers carry 32k: the scale-up must not starve the job while memory is explored
    behind = _assessment(average=45_000.0, hit_rate=0.4, capacities=_capacities(8_000.0))
    proposal = _policy().propose_configuration(behind, _knowledge())
    assert (proposal.rule, proposal.scaleout, proposal.memory_level) == ("memory-up", 6, 1)  # 6 × 8k > 45k


def test_on_a_ramp_the_scale_up_carries_the_load_until_the_next_decision_can_follow():
    """4 workers carry the present 35k, but the forecast passes 40k within the 240 s before a next decision
    (stabilization + one loop): the level-up takes the workers that carry it. Without a lookahead only the
    present load counts (the default of a policy built outside the daemon)."""
    ramp = _assessment(hit_rate=0.4)
    cpu = ProactivePolicy(1, 12, recovery_target_s=600.0, loop_interval_s=60.0)
    ahead = MemoryAwarePolicy(cpu, LEVELS, Prices(), MemorySettings(), level_up_lookahead_s=240.0)
    proposal = ahead.propose_configuration(ramp, _knowledge())
    assert (proposal.rule, proposal.scaleout, proposal.memory_level) == ("memory-up", 5, 1)
    assert "forecast upper bound over the next 240 s" in proposal.reasons[-1]
    assert _policy().propose_configuration(ramp, _knowledge()).scaleout == 4
    short = MemoryAwarePolicy(cpu, LEVELS, Prices(), MemorySettings(), level_up_lookahead_s=60.0)
    assert short.propose_configuration(ramp, _knowledge()).scaleout == 4  # 38k in 60 s: 4 carry it


# ---- Justin: keep going up while it helps, roll back when it did not --------------------------------
def test_a_scale_up_that_raised_the_hit_rate_is_followed_by_another():
    knowledge = _knowledge(_scaled_up(0, 1, hit_rate=0.5))
    proposal = _policy().propose_configuration(_assessment(level=1, hit_rate=0.7), knowledge)
    assert (proposal.scaleout, proposal.rule, proposal.memory_level) == (4, "memory-up-again", 2)


def test_a_scale_up_that_cut_the_latency_is_followed_by_another():
    knowledge = _knowledge(_scaled_up(0, 1, hit_rate=NAN, latency_ns=2e6))
    proposal = _policy().propose_configuration(
        _assessment(level=1, hit_rate=NAN, latency_ns=1.5e6), knowledge
    )
    assert (proposal.rule, proposal.memory_level) == ("memory-up-again", 2)


def test_after_a_helpful_scale_up_with_no_misses_left_it_scales_out():
    knowledge = _knowledge(_scaled_up(0, 1, hit_rate=0.5))
    proposal = _policy().propose_configuration(
        _assessment(level=1, hit_rate=1.0, latency_ns=2_000.0), knowledge
    )
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb) == (5, "long-lived", None)


def test_a_scale_up_that_did_not_help_is_rolled_back_and_the_job_scaled_out():
    knowledge = _knowledge(_scaled_up(0, 1, hit_rate=0.5))
    proposal = _policy().propose_configuration(
        _assessment(level=1, hit_rate=0.505, latency_ns=NAN), knowledge
    )
    assert (proposal.rule, proposal.memory_level, proposal.managed_mb) == ("memory-rollback", 0, 158.0)
    assert proposal.scaleout == 5  # at least the scale-out planned at level 1


def test_a_rollback_scales_out_as_far_as_the_lower_level_needs():
    knowledge = _knowledge(_scaled_up(0, 1, hit_rate=0.5))
    assessment = _assessment(level=1, hit_rate=0.5, latency_ns=NAN, others={0: _capacities(6_000.0)})
    proposal = _policy().propose_configuration(assessment, knowledge)
    assert (proposal.rule, proposal.scaleout, proposal.memory_level) == (
        "memory-rollback",
        8,
        0,
    )  # 8 × 6k > 45k


def test_hysteresis_a_gain_below_the_margin_is_no_improvement():
    knowledge = _knowledge(_scaled_up(0, 1, hit_rate=0.5))
    small_gain = _assessment(level=1, hit_rate=0.509, latency_ns=NAN)
    assert (
        _policy(min_hit_rate_gain=0.01).propose_configuration(small_gain, knowledge).rule == "memory-rollback"
    )
    assert (
        _policy(min_hit_rate_gain=0.0).propose_configuration(small_gain, knowledge).rule == "memory-up-again"
    )


def test_when_nothing_compares_with_before_the_memory_is_left_alone():
    knowledge = _knowledge(_scaled_up(0, 1, hit_rate=NAN, latency_ns=NAN))
    proposal = _policy().propose_configuration(_assessment(level=1, hit_rate=0.5, latency_ns=NAN), knowledge)
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb) == (5, "long-lived", None)


def test_after_a_plain_scale_out_pressure_is_judged_afresh():
    proposal = _policy().propose_configuration(_assessment(hit_rate=0.6), _knowledge(_scaled_out()))
    assert (proposal.rule, proposal.memory_level) == ("memory-up", 1)


def test_a_known_level_is_not_explored_again():
    # level 1 was tried (its capacities are known) and is no cheaper: no scale-up, the cost choice decides
    others = {1: _capacities(10_500.0)}
    proposal = _policy().propose_configuration(
        _assessment(hit_rate=0.6, others=others), _knowledge(_scaled_out())
    )
    assert (proposal.scaleout, proposal.rule, proposal.managed_mb) == (5, "long-lived", None)


# ---- the cost comparison over (n, level) -----------------------------------------------------------
def test_the_cheapest_level_that_meets_the_rules_wins():
    others = {2: _capacities(25_000.0)}  # 2 workers at level 2 carry 45k
    proposal = _policy().propose_configuration(_assessment(hit_rate=0.9, others=others), _knowledge())
    assert (proposal.scaleout, proposal.rule, proposal.memory_level, proposal.managed_mb) == (
        2,
        "cheaper-level",
        2,
        632.0,
    )


def test_a_configuration_that_holds_is_left_only_for_a_real_saving():
    others = {1: _capacities(10_500.0)}  # 4 × 10.5k at level 1 costs more: never chosen
    holding = _assessment(peak=35_000.0, hit_rate=0.9, others=others)
    assert _policy().propose_configuration(holding, _knowledge()).rule == "current-valid"
    others = {2: _capacities(12_000.0)}  # 3 at level 2 carry 35k: 3 × 1.27 = 3.81 vs 4 × 1.21 = 4.85 (-21%)
    holding = _assessment(peak=35_000.0, hit_rate=0.9, others=others)
    assert (
        _policy(switch_min_saving=0.25).propose_configuration(holding, _knowledge()).rule == "current-valid"
    )
    assert (
        _policy(switch_min_saving=0.10).propose_configuration(holding, _knowledge()).rule == "cheaper-level"
    )


def test_another_level_must_save_enough_even_when_the_plan_scales_out_anyway():
    others = {1: _capacities(12_000.0)}  # 4 at level 1 carry 45k: 4 × 1.29 = 5.15 vs 5 × 1.22 = 6.10 (-16%)
    assessment = _assessment(hit_rate=0.9, others=others)
    assert _policy(switch_min_saving=0.2).propose_configuration(assessment, _knowledge()).rule == "long-lived"
    assert (
        _policy(switch_min_saving=0.1).propose_configuration(assessment, _knowledge()).rule == "cheaper-level"
    )


def test_when_nothing_is_valid_at_the_current_level_any_valid_level_wins():
    others = {2: _capacities(20_000.0)}  # 10k per worker never carries 200k; 12 at level 2 do (240k)
    assessment = _assessment(average=200_000.0, peak=200_000.0, current=10, hit_rate=0.9, others=others)
    proposal = _policy(switch_min_saving=0.5).propose_configuration(assessment, _knowledge())
    assert (proposal.rule, proposal.scaleout, proposal.memory_level) == ("cheaper-level", 11, 2)


def test_another_level_is_planned_on_its_own_lag_after_the_restart():
    # 2 workers at level 2 carry 45k, but their restart would leave the lag over the SLO for 90 s; 3 for 10 s
    others = {2: _capacities(25_000.0)}
    assessment = _assessment(hit_rate=0.9, others=others)
    catch_up = {2: {n: (90.0 if n < 3 else 10.0) for n in range(1, 13)}}
    bound = dataclasses.replace(
        assessment, memory=dataclasses.replace(assessment.memory, lag_catch_up_by_level=catch_up)
    )
    cpu = ProactivePolicy(1, 12, recovery_target_s=600.0, loop_interval_s=60.0, lag_catch_up_s=20.0)
    proposal = MemoryAwarePolicy(cpu, LEVELS, Prices(), MemorySettings()).propose_configuration(
        bound, _knowledge()
    )
    assert (proposal.scaleout, proposal.memory_level) == (3, 2)
    # the current level's catch-ups (all long here) do not stand in for level 2's
    current_only = dataclasses.replace(bound, lag_catch_up_s=dict.fromkeys(range(1, 13), 90.0))
    current_only = dataclasses.replace(current_only, memory=assessment.memory)
    proposal = MemoryAwarePolicy(cpu, LEVELS, Prices(), MemorySettings()).propose_configuration(
        current_only, _knowledge()
    )
    assert (proposal.scaleout, proposal.memory_level) == (2, 2)


def test_no_cheaper_level_with_less_capacity_while_catching_up():
    others = {2: _capacities(25_000.0)}
    behind = _assessment(average=20_000.0, peak=20_000.0, current=6, hit_rate=0.9, others=others, backlog=5e6)
    proposal = _policy().propose_configuration(behind, _knowledge())
    assert proposal.memory_level is None and proposal.rule != "cheaper-level"


def test_prices_decide_between_more_workers_and_more_memory():
    # 4 workers at 1,264 MB carry 45k (4 × 3,154 MB) and so do 5 at 158 MB (5 × 2,048 MB)
    others = {3: _capacities(12_000.0)}
    assessment = _assessment(hit_rate=0.9, others=others)
    assert _policy().propose_configuration(assessment, _knowledge()).memory_level == 3
    expensive_memory = MemoryAwarePolicy(
        ProactivePolicy(1, 12, 600.0, 60.0), LEVELS, Prices(memory_per_gb=2.0), MemorySettings()
    )
    proposal = expensive_memory.propose_configuration(assessment, _knowledge())
    assert (proposal.scaleout, proposal.managed_mb) == (5, None)
