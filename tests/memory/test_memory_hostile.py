"""Hostile inputs to the memory levels: a lowered `max_level`, hand-edited stores, late state metrics,
implausible readings, a spent rescale budget, a changed `base_mb`. Each is bad data or a configuration
change: the loop must keep deciding, safely."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from mape.knowledge import Knowledge
from mape.proactive import ProactivePolicy
from memory.analysis import MemoryAnalysis
from memory.capacities import LevelCapacities
from memory.cost import Prices
from memory.history import MemoryHistory, OperatorDecision
from memory.knowledge import MEMORY, RETRY_FAILED_LEVEL_S, MemoryKnowledge, memory_of
from memory.levels import MemoryLevels
from memory.policy import MemoryAwarePolicy, MemorySettings
from messages.types import Assessment, FailedMemoryChange, Observation, OperatorState
from tests.memory.test_memory_capacity import _learn
from tests.memory.test_memory_policy import NOW_S, _assessment, _knowledge, _policy, _scaled_up

LOWERED = MemoryLevels(158.0, 1)
"""`memory.max_level` lowered from 3 (the store's) to 1."""


def _observation(managed_mb: float | None, stateful: bool = True) -> Observation:
    return Observation(
        time_s=600.0,
        window_s=60.0,
        input_timestamps_s=np.arange(545.0, 601.0, 5.0),
        input_rate_rps=np.full(12, 1000.0),
        workers=(),
        backlog_records=0.0,
        parallelism=2,
        uptime_s=600.0,
        operators=(OperatorState("lookup", stateful, 0.5),),
        managed_memory_mb=managed_mb,
    )


def _plain_assessment() -> Assessment:
    return Assessment(
        time_s=600.0,
        current_scaleout=2,
        workload_avg_rps=1000.0,
        workload_max_rps=1000.0,
        backlog_records=0.0,
        capacities_rps={},
        capacity_sources={},
        forecast_rps=None,
        recovery_s={},
    )


def _lowered_policy(**cpu_options) -> MemoryAwarePolicy:
    cpu = ProactivePolicy(1, 12, recovery_target_s=600.0, loop_interval_s=60.0, **cpu_options)
    return MemoryAwarePolicy(cpu, LOWERED, Prices(), MemorySettings())


def _with_memory(state: dict) -> Knowledge:
    knowledge = Knowledge()
    knowledge.extensions[MEMORY] = MemoryKnowledge.from_dict(state)
    return knowledge


# ---- 1. a lowered max_level ------------------------------------------------------------------------
def test_a_saved_level_above_a_lowered_max_level_is_clamped_and_its_memory_kept():
    knowledge = _with_memory({"level": 3, "history": {"stateful": ["lookup"]}})
    analysis = MemoryAnalysis(LOWERED, 18, 60.0)
    observation = _observation(managed_mb=None)  # the managed memory is not read
    analysis.capacity_model(observation, knowledge, 2)
    memory = analysis.refine(observation, knowledge, _plain_assessment()).memory
    assert (memory.level, memory.managed_mb) == (1, 1264.0)


def test_capacities_of_levels_above_max_level_are_not_offered():
    capacities = LevelCapacities()
    _learn(capacities, 0, 2, 5_000.0, configuration=True)
    _learn(capacities, 3, 2, 9_000.0, configuration=True)
    knowledge = _with_memory({"levels": capacities.to_dict(), "history": {"stateful": ["lookup"]}})
    memory_of(knowledge).history.readers = {"lookup"}
    analysis = MemoryAnalysis(LOWERED, 18, 60.0)
    observation = _observation(managed_mb=316.0)
    analysis.capacity_model(observation, knowledge, 2)
    memory = analysis.refine(observation, knowledge, _plain_assessment()).memory
    assert memory.level == 1 and set(memory.capacities_by_level) == {0}


def test_a_job_running_above_a_lowered_max_level_steps_down_to_the_top_level():
    proposal = _lowered_policy().propose_configuration(_assessment(level=1, managed_mb=1264.0), _knowledge())
    assert (proposal.rule, proposal.managed_mb, proposal.memory_level) == ("memory-above-max-level", 316.0, 1)
    assert proposal.scaleout >= 4


def test_a_rollback_to_a_level_above_max_level_is_skipped():
    knowledge = _knowledge(_scaled_up(2, 3, hit_rate=0.5))  # the last step, under max_level 3
    proposal = _lowered_policy().propose_configuration(_assessment(level=1, managed_mb=316.0), knowledge)
    assert proposal.rule != "memory-rollback" and proposal.memory_level in (None, 0, 1)


# ---- 2. an ill-typed history ------------------------------------------------------------------------
def test_an_ill_typed_history_entry_is_dropped_and_the_rest_kept_and_saved():
    entry = {
        "operator": "lookup",
        "time_s": 9400,
        "from_scaleout": 4,
        "to_scaleout": 4,
        "from_level": 0,
        "to_level": 1,
        "rule": "memory-up",
    }
    history = MemoryHistory.from_dict(
        {
            "stateful": [1, "lookup", "join"],
            "readers": ["lookup", None],
            "last": {"lookup": entry, "join": {**entry, "operator": "join", "to_level": "1"}},
        }
    )
    assert history.stateful == {"lookup", "join"} and history.readers == {"lookup"}
    assert set(history.last) == {"lookup"} and history.last["lookup"].to_level == 1
    json.dumps(history.to_dict())  # saving works again


# ---- 3. state metrics missing at first ------------------------------------------------------------
def test_a_job_whose_state_has_not_shown_yet_keeps_its_memory_when_it_scales_out():
    knowledge = Knowledge()
    analysis = MemoryAnalysis(MemoryLevels(), 18, 60.0)
    analysis.capacity_model(_observation(158.0, stateful=False), knowledge, 4)
    proposal = _policy().propose_configuration(_at(_assessment(stateful=False), 600.0), knowledge)
    assert proposal.scaleout == 5 and proposal.managed_mb is None


def test_a_short_loop_gives_the_state_metrics_a_minute_before_the_memory_goes():
    """At a 10-s loop two windows span 10 s: a stateful job whose RocksDB metrics come 20 s after its start
    would have lost its memory (and paid a `memory-restore` restart). A state that shows restarts the
    clock."""
    analysis = MemoryAnalysis(MemoryLevels(), 18, 60.0)

    def released_at(times_s: np.ndarray, stateful_at: float | None = None) -> float | None:
        knowledge = Knowledge()
        for time_s in times_s:
            observation = dataclasses.replace(
                _observation(158.0, stateful=time_s == stateful_at), time_s=float(time_s)
            )
            analysis.capacity_model(observation, knowledge, 4)
            proposal = _policy().propose_configuration(_at(_assessment(stateful=False), time_s), knowledge)
            if proposal.managed_mb == 0.0:
                return float(time_s)
        return None

    assert released_at(np.arange(10.0, 200.0, 10.0), stateful_at=30.0) == 100.0
    assert released_at(np.arange(60.0, 600.0, 60.0)) == 120.0  # the default loop: its second window


def _at(assessment: Assessment, time_s: float) -> Assessment:
    return dataclasses.replace(assessment, time_s=float(time_s))


# ---- 4. implausible readings ------------------------------------------------------------------------
def test_an_implausible_managed_memory_reading_holds_the_memory_and_says_so():
    knowledge = _knowledge()
    analysis = MemoryAnalysis(MemoryLevels(), 18, 60.0)
    analysis.capacity_model(_observation(158.0), knowledge, 4)
    for bad_mb in (1e12, 158.0 * 1048576, -5.0, math.inf):  # garbled, in bytes, negative
        analysis.capacity_model(_observation(bad_mb), knowledge, 4)
        assert memory_of(knowledge).level == 0
        proposal = _policy().propose_configuration(_assessment(managed_mb=bad_mb), knowledge)
        assert proposal.managed_mb is None and "implausible" in proposal.reasons[-1]


def test_an_implausible_state_latency_is_no_memory_pressure():
    proposal = _policy().propose_configuration(_assessment(hit_rate=math.nan, latency_ns=1e30), _knowledge())
    assert (proposal.rule, proposal.managed_mb) == ("long-lived", None)


# ---- 5. the rescale budget ---------------------------------------------------------------------------
def test_another_level_waits_for_the_rescale_budget_like_a_scale_in():
    policy = _lowered_policy(max_rescales_per_h=2)
    knowledge = _knowledge()
    knowledge.record_rescale(NOW_S - 1000.0, 8)  # the budget less one rescale is spent
    cheaper = {1: {n: n * 20_000.0 for n in range(1, 13)}}
    assessment = _assessment(current=8, hit_rate=0.95, latency_ns=1e4, others=cheaper)
    proposal = policy.propose_configuration(assessment, knowledge)
    assert (proposal.scaleout, proposal.managed_mb) == (8, None)
    fresh = policy.propose_configuration(assessment, _knowledge())
    assert fresh.rule == "cheaper-level"  # the same switch with budget left


# ---- 6. a hand-edited balance ------------------------------------------------------------------------
def test_a_stored_balance_outside_0_to_1_is_dropped():
    stored = {"balance": {"2": 0.5, "4": 50.0, "6": 0.0, "8": "x"}}
    assert LevelCapacities.from_dict(stored).balance == {2: 0.5}


# ---- 7. a changed base_mb ---------------------------------------------------------------------------
def test_capacities_follow_their_mb_when_base_mb_changes_and_the_rest_is_dropped():
    capacities = LevelCapacities()
    _learn(capacities, 2, 2, 5_000.0, configuration=True)  # 632 MB at base 158
    state = {
        "levels": capacities.to_dict(),
        "history": {"stateful": ["lookup"]},
        "level": 2,
        "base_mb": 158.0,
    }
    halved = _with_memory(state)
    MemoryAnalysis(MemoryLevels(79.0, 3), 18, 60.0).capacity_model(_observation(None), halved, 2)
    assert set(memory_of(halved).capacities.models) == {(3, 2)} and memory_of(halved).level == 3
    assert memory_of(halved).to_dict()["base_mb"] == 79.0
    other = _with_memory(state)
    MemoryAnalysis(MemoryLevels(100.0, 3), 18, 60.0).capacity_model(_observation(None), other, 2)
    assert memory_of(other).capacities.known_levels() == []  # 632 MB is no level of base 100


def test_another_level_gives_up_at_most_max_scale_in_share_of_the_running_capacity():
    cheaper = {1: {n: n * 20_000.0 for n in range(1, 13)}}
    assessment = _assessment(current=8, hit_rate=0.95, latency_ns=1e4, others=cheaper)
    assert _lowered_policy().propose_configuration(assessment, _knowledge()).scaleout == 3  # 60k of 80k
    held = _lowered_policy(max_scale_in_share=0.2).propose_configuration(assessment, _knowledge())
    assert held.rule != "cheaper-level" and held.managed_mb is None


# ---- 8. stored values no window gives ----------------------------------------------------------------
def test_a_stored_level_no_configuration_has_is_dropped_not_a_phase_error_every_iteration():
    """Level 2000 passed as an int: 158 MB * 2**2000 overflowed in every iteration's analysis."""
    knowledge = _with_memory({"level": 2000, "history": {"stateful": ["lookup"]}})
    assert memory_of(knowledge).level is None
    MemoryAnalysis(MemoryLevels(), 18, 60.0).capacity_model(_observation(158.0), knowledge, 2)
    assert memory_of(knowledge).level == 0


def test_a_stored_managed_memory_no_level_has_is_dropped_and_the_level_kept():
    """1e300 MB stored restarted a job at level 1 into the top level, the audit calling it a step down."""
    knowledge = _with_memory({"level": 1, "managed_mb": 1e300, "history": {"stateful": ["lookup"]}})
    MemoryAnalysis(MemoryLevels(), 18, 60.0).capacity_model(_observation(None), knowledge, 2)
    assert (memory_of(knowledge).level, memory_of(knowledge).managed_mb) == (1, 316.0)


def test_a_stateless_run_dated_after_now_is_dated_again():
    """A stored start after now never aged: the stateless job kept its managed memory for good."""
    knowledge = _with_memory({"level": 0, "managed_mb": 158.0, "stateless_since_s": 1e9})
    analysis = MemoryAnalysis(MemoryLevels(), 18, 60.0)
    analysis.capacity_model(_observation(158.0, stateful=False), knowledge, 4)
    assert memory_of(knowledge).stateless_since_s == 600.0


def test_a_stored_capacity_of_a_negative_level_is_dropped():
    """Level -1 stored raised in every refine of a job reading through the block cache."""
    capacities = LevelCapacities()
    _learn(capacities, 0, 4, 5_000.0, configuration=True)
    stored = capacities.to_dict()
    stored["models"]["-1@4"] = stored["models"]["0@4"]
    assert set(LevelCapacities.from_dict(stored).models) == {(0, 4)}


def test_a_stored_hit_rate_outside_0_to_1_is_unknown_not_a_step_that_improved_nothing():
    """5.0 stored made a step from 0.5 to 0.9 read as no gain: rolled back with a restart."""
    entry = {
        "operator": "lookup", "time_s": 9400, "from_scaleout": 4, "to_scaleout": 4, "from_level": 0,
        "to_level": 1, "rule": "memory-up", "hit_rate_before": 5.0, "latency_ns_before": -3.0,
    }  # fmt: skip
    decision = MemoryHistory.from_dict({"stateful": ["lookup"], "last": {"lookup": entry}}).last["lookup"]
    assert math.isnan(decision.hit_rate_before) and math.isnan(decision.latency_ns_before)


def test_a_level_up_no_scale_out_carries_says_it_takes_the_most():
    assessment = _assessment(average=150_000.0, peak=150_000.0, hit_rate=0.5)  # 12 workers carry 120,000
    proposal = _policy().propose_configuration(assessment, _knowledge())
    assert proposal.rule == "memory-up" and "with 12 workers, the most: none carries" in proposal.reasons[-1]


# ---- 5. a memory change that never ran -------------------------------------------------------------
def test_a_level_up_that_timed_out_is_no_step_to_judge_and_is_not_tried_again_for_an_hour():
    """The level-up's pods never came up (no node had room): the job ran on at level 0. Its history entry
    read as a level-up that improved nothing, so the next decision rolled it back; and once that rollback
    was the last step, the pressure explored the same level again, to time out again."""
    knowledge = _knowledge(_scaled_up(0, 1))
    memory_of(knowledge).level, memory_of(knowledge).managed_mb = 1, 316.0  # set when it was executed
    analysis = MemoryAnalysis(MemoryLevels(), 18, 60.0)
    failed = FailedMemoryChange(NOW_S - 600, 316.0)

    def propose(
        time_s: float,
        failures: tuple[FailedMemoryChange, ...] = (),
        on: Knowledge = knowledge,
        managed_mb: float | None = 158.0,
    ):
        observation = dataclasses.replace(
            _observation(managed_mb), time_s=time_s, failed_memory_changes=failures
        )
        analysis.capacity_model(observation, on, 4)
        assessment = analysis.refine(observation, on, _at(_assessment(), time_s))
        return _policy().propose_configuration(assessment, on)

    held = propose(NOW_S, (failed,), managed_mb=None)  # the job is down: it reads no memory
    assert memory_of(knowledge).level == 0, "the level it runs is the one before the change"
    assert held.rule != "memory-rollback"
    assert (held.scaleout, held.memory_level) == (5, None), "scaled out at level 0, not up to level 1 again"
    assert memory_of(knowledge).history.last["lookup"].to_level == 0
    restarted = _with_memory(json.loads(json.dumps(memory_of(knowledge).to_dict())))
    assert memory_of(restarted).failed_changes == [failed]
    assert propose(NOW_S + 1800, on=restarted).memory_level is None, "a restarted daemon waits as long"
    later = propose(NOW_S - 600 + RETRY_FAILED_LEVEL_S + 60)
    assert (later.rule, later.memory_level) == ("memory-up", 1), "after an hour the cluster may have room"


def test_a_level_down_that_timed_out_is_withdrawn_and_blocks_no_level():
    """A rollback from level 1 to 0 whose pods never came: the job still runs level 1 (down, it reads no
    memory), and less memory finding no room says nothing about any level: none is avoided. A release of
    a stateless job's memory (no history) changes nothing either."""
    rollback = OperatorDecision("lookup", NOW_S - 600, 4, 4, 1, 0, "memory-rollback", 0.5)
    knowledge = _knowledge(rollback)
    memory_of(knowledge).level, memory_of(knowledge).managed_mb = 0, 158.0  # set when it was executed
    observation = dataclasses.replace(
        _observation(None), time_s=NOW_S, failed_memory_changes=(FailedMemoryChange(NOW_S - 600, 158.0),)
    )
    MemoryAnalysis(MemoryLevels(), 18, 60.0).capacity_model(observation, knowledge, 4)
    memory = memory_of(knowledge)
    assert (memory.level, memory.managed_mb) == (1, 316.0)
    assert memory.history.last["lookup"].to_level == 1
    assert memory.unreachable_levels(MemoryLevels(), NOW_S) == frozenset()

    stateless = Knowledge()
    released = dataclasses.replace(observation, failed_memory_changes=(FailedMemoryChange(NOW_S - 600, 0.0),))
    MemoryAnalysis(MemoryLevels(), 18, 60.0).capacity_model(released, stateless, 4)
    assert memory_of(stateless).unreachable_levels(MemoryLevels(), NOW_S) == frozenset()
