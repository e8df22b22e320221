"""The per-vertex plan: DS2's walk from the forecast, slot sharing, the recovery bound with the per-vertex
path's own downtime, scale-downs only when they save slots, and the loop executing it through REST."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from config.schema import Config
from daemon.build import knowledge_settings, make_loop, make_twin
from mape.knowledge import Knowledge
from mape.knowledge_store import KnowledgeStore
from mape.plan import GuardedPlan
from mape.vertex_knowledge import VERTEX, VertexKnowledge
from mape.vertex_plan import (
    SLOT_CPU,
    LatencyTerms,
    Sizing,
    VertexPolicy,
    largest_range_factor,
    slots_needed,
    taskmanagers_for,
)
from messages.types import (
    Assessment,
    CompletedRescale,
    Decision,
    JobEdge,
    JobGraph,
    JobVertex,
    Observation,
    SubtaskSeries,
    WorkerSeries,
)

GRAPH = JobGraph(
    (
        JobVertex("src", "source", 2, 128),
        JobVertex("map", "map", 4, 128),
        JobVertex("agg", "agg", 4, 128),
    ),
    (JobEdge("src", "map", "REBALANCE"), JobEdge("map", "agg", "HASH")),
)
RATES = {"src": 10_000.0, "map": 1_000.0, "agg": 2_000.0}
"""Per-subtask source records/s each vertex carries (its capacity grows linearly with p)."""


class _Learned:
    key_loads = np.ones(128) / 128  # even key groups: sized on the learned loads, no range factor


class FakeDag:
    """The slice of capacity/dag.py the plan reads: capacities linear in the parallelism. A stand-in so
    that each rule's test states the capacities it plans on (which rates were seen, which are unknown);
    the plan on the real DagModel, learned from seeds, runs in tests/mape/test_vertex_plan_limits.py."""

    def __init__(self, rates=RATES, unknown=(), seen=None):
        self.rates, self.unknown, self.seen = rates, set(unknown), seen
        """Parallelisms whose rates were observed (None: all); the others' are carried over ('nearest')."""
        self.vertices = {vid: _Learned() for vid in rates}

    def input_ratios(self, graph):
        return dict.fromkeys(self.rates, 1.0)

    def shares(self, graph, vertex_id, parallelism):
        return np.full(parallelism, 1.0 / parallelism)

    def vertex_rates(self, graph, vertex_id, parallelism):
        if vertex_id in self.unknown:
            return np.full(parallelism, np.nan), "unknown"
        return np.full(parallelism, self.rates[vertex_id] * 1.0), "observed"

    def capacity_curve(self, graph, vertex_id, ratio, top):
        if vertex_id in self.unknown:
            return np.full(top, math.inf), ["unknown"] * top
        kinds = ["observed" if self.seen is None or p in self.seen else "nearest" for p in range(1, top + 1)]
        return np.arange(1, top + 1) * self.rates[vertex_id], kinds


def knowledge_with(dag, *, cpu_per_busy=0.1, downtime_s=3.0, last_rescale_s=None) -> Knowledge:
    knowledge = Knowledge()
    knowledge.dag = dag
    state = VertexKnowledge.fresh(downtime_s)
    state.graph, state.cpu_per_busy = GRAPH, cpu_per_busy
    knowledge.extensions[VERTEX] = state
    knowledge.last_rescale_s = last_rescale_s
    return knowledge


def assessment(rate_rps: float, backlog: float = 0.0, graph: JobGraph | None = None) -> Assessment:
    """The plan reads the graph from its knowledge; the assessment only tells it the analysis saw the
    vertices (`graph`, default GRAPH)."""
    from messages.types import VertexAssessment

    vertices = tuple(
        VertexAssessment(v.vertex_id, v.name, v.parallelism, False, 1.0, 1.0, 1.0, 0.5, 0.0, 1.0, 1.0)
        for v in (graph or GRAPH).vertices
    )
    return Assessment(
        time_s=3_600.0,
        current_scaleout=4,
        workload_avg_rps=rate_rps,
        workload_max_rps=rate_rps,
        backlog_records=backlog,
        capacities_rps={},
        capacity_sources={},
        forecast_rps=np.full(900, rate_rps),
        vertices=vertices,
    )


def policy(**knobs) -> VertexPolicy:
    return VertexPolicy(1, 32, 600.0, 60.0, **knobs)


def test_slots_are_the_widest_vertex_per_group_summed():
    assert slots_needed({"a": 3, "b": 8, "c": 2}) == 8
    assert slots_needed({"a": 3, "b": 8, "c": 2}, {"c": "io"}) == 10
    assert taskmanagers_for(10, 4) == 3 and taskmanagers_for(8, 4) == 2


def test_key_groups_split_evenly_only_at_divisors():
    assert largest_range_factor(8, 128) == 1.0
    assert largest_range_factor(12, 128) == pytest.approx(11 * 12 / 128)


def test_ds2_walk_sizes_each_vertex_for_the_rate():
    config = Sizing(GRAPH, FakeDag(), 32, cpu_per_busy=0.01).configuration(7_500.0, {})
    assert config.parallelism == {"src": 1, "map": 8, "agg": 4}
    assert config.rules == {"src": "ds2-walk", "map": "ds2-walk", "agg": "ds2-walk-keyed"}
    assert config.slots == 8 and config.capacity_rps >= 7_500.0


def test_a_keyed_vertex_without_learned_key_loads_is_sized_on_its_largest_key_group_range():
    dag = FakeDag()
    del dag.vertices["agg"]  # nothing learned of its key groups
    config = Sizing(GRAPH, dag, 32, cpu_per_busy=0.01).configuration(11_800.0, {})
    # 6 subtasks would carry 12,000 rps if even, but one holds 22 of 128 groups: 2,000 × 128/22 < 11,800
    assert config.parallelism["agg"] == 7


def test_the_shared_slot_gets_subtasks_until_its_core_fits():
    sizing = Sizing(GRAPH, FakeDag(), 32, cpu_per_busy=1.0)
    config = sizing.configuration(7_500.0, {})
    assert 7_500.0 * sizing.slot_cpu_per_record(config.parallelism) <= SLOT_CPU
    assert "slot-cpu" in config.rules.values()
    assert config.slots > 8  # the DS2 walk alone (8) would overload slot 0


def test_a_vertex_of_unknown_rate_follows_the_vertex_it_feeds_or_keeps_its_parallelism():
    config = Sizing(GRAPH, FakeDag(unknown={"src"}), 32, cpu_per_busy=0.01).configuration(7_500.0, {"src": 2})
    assert config.parallelism["src"] == 8 and config.rules["src"] == "follow-downstream"
    # one that reports busy time but has no rate learned (nearly idle, or waiting on backpressure) keeps
    idle_src = Sizing(GRAPH, FakeDag(unknown={"src"}), 32, 0.01, reports_busy=frozenset({"src"}))
    config = idle_src.configuration(7_500.0, {"src": 2})
    assert config.parallelism["src"] == 2 and config.rules["src"] == "keep-unknown-rate"
    config = Sizing(GRAPH, FakeDag(unknown={"agg"}), 32, cpu_per_busy=0.01).configuration(7_500.0, {"agg": 3})
    assert config.parallelism["agg"] == 3 and config.rules["agg"] == "keep-unknown-rate"


def test_forward_edges_keep_both_ends_equal():
    graph = JobGraph(GRAPH.vertices, (JobEdge("src", "map", "FORWARD"), JobEdge("map", "agg", "HASH")))
    config = Sizing(graph, FakeDag(), 32, cpu_per_busy=0.01).configuration(7_500.0, {})
    assert config.parallelism["src"] == config.parallelism["map"] == 8
    assert config.rules["src"] == "forward-edge"


def test_scale_up_changes_every_vertex_in_one_proposal_with_a_rule_each():
    proposal = policy().propose_configuration(assessment(9_500.0), knowledge_with(FakeDag()))
    assert proposal.rule == "vertex-long-lived"
    assert proposal.vertex_parallelism == {"src": 1, "map": 10, "agg": 5}
    assert proposal.current_vertex_parallelism == {"src": 2, "map": 4, "agg": 4}
    assert proposal.vertex_rules["src"] == "ride-along-down"  # comes down in a rescale that happens anyway
    assert proposal.vertex_rules["map"] == "ds2-walk"
    assert proposal.scaleout == 10  # TaskManagers: 10 slots, one per TaskManager


def test_a_scale_out_is_sized_for_the_lookahead_and_a_scale_in_for_the_whole_horizon():
    """Per-vertex rescales take seconds: growing for the next 240 s and again when the load does is cheaper
    than holding the horizon's peak from now on; but what comes down must carry the horizon."""
    rising = dataclasses.replace(assessment(4_500.0), forecast_rps=np.repeat([4_500.0, 9_500.0], [600, 300]))
    near = policy(scale_out_lookahead_s=240.0).propose_configuration(rising, knowledge_with(FakeDag()))
    assert near.vertex_parallelism == {"src": 1, "map": 5, "agg": 3}  # 2/4/4 carries 4,000: grows for 4,500
    assert "forecast peak of the next 240 s" in " ".join(near.reasons)
    whole = policy().propose_configuration(rising, knowledge_with(FakeDag()))
    assert whole.vertex_parallelism == {"src": 1, "map": 10, "agg": 5}
    # a dip now, 3,500 back within the horizon: the running 2/4/4 stays (a scale-in to 1/2/1 would not last)
    dip = dataclasses.replace(assessment(1_500.0), forecast_rps=np.repeat([1_500.0, 3_500.0], [600, 300]))
    kept = policy(scale_out_lookahead_s=240.0).propose_configuration(dip, knowledge_with(FakeDag()))
    assert kept.rule == "vertex-current-valid" and kept.vertex_parallelism == kept.current_vertex_parallelism


def test_no_scale_down_that_saves_no_slot_unless_subtasks_have_a_price():
    knowledge = knowledge_with(FakeDag())
    kept = policy().propose_configuration(assessment(3_500.0), knowledge)  # needs src 1, map 4, agg 2
    assert kept.rule == "vertex-current-valid"
    assert kept.vertex_parallelism == kept.current_vertex_parallelism
    assert kept.vertex_rules["agg"] == "keep-no-saving"
    priced = policy(subtask_price=1.0).propose_configuration(assessment(3_500.0), knowledge)
    assert priced.vertex_parallelism == {"src": 1, "map": 4, "agg": 2}


def test_a_scale_down_that_saves_slots_happens_when_caught_up_only():
    knowledge = knowledge_with(FakeDag())
    down = policy().propose_configuration(assessment(1_500.0), knowledge)
    assert down.vertex_parallelism == {"src": 1, "map": 2, "agg": 1} and down.scaleout == 2
    catching_up = policy().propose_configuration(assessment(1_500.0, backlog=300_000.0), knowledge)
    assert catching_up.rule == "vertex-current-valid"
    assert catching_up.vertex_parallelism == catching_up.current_vertex_parallelism


def test_a_scale_in_below_every_parallelism_seen_gives_up_at_most_its_share_of_the_running_capacity():
    knowledge = knowledge_with(FakeDag(seen={2, 4}))  # running src 2, map 4, agg 4: carries 4,000 rps (map)
    free = policy().propose_configuration(assessment(500.0), knowledge)
    assert free.vertex_parallelism == {"src": 1, "map": 1, "agg": 1}  # 1,000 rps: a quarter of the capacity
    limited = policy(max_scale_in_share=0.6).propose_configuration(assessment(500.0), knowledge)
    assert limited.vertex_parallelism == {"src": 1, "map": 2, "agg": 1}  # sized for 40%: 1,600 rps
    assert "gives up at most 60% of the running 4000 rps" in " ".join(limited.reasons)
    within = policy(max_scale_in_share=0.6).propose_configuration(assessment(1_500.0), knowledge)
    assert within.vertex_parallelism == {"src": 1, "map": 2, "agg": 1}  # 2,000 ≥ 1,600: as chosen
    seen = knowledge_with(FakeDag())  # every parallelism's rate observed: the model is trusted all the way
    trusted = policy(max_scale_in_share=0.6).propose_configuration(assessment(500.0), seen)
    assert trusted.vertex_parallelism == {"src": 1, "map": 1, "agg": 1}


def test_under_a_rescale_budget_a_scale_in_waits_for_the_last_hour_and_a_scale_out_carries_the_horizon():
    knowledge = knowledge_with(FakeDag())  # assessed at 3,600 s
    knowledge.record_rescale(3_000.0, 4)
    held = policy(max_rescales_per_h=2.0).propose_configuration(assessment(1_500.0), knowledge)
    assert held.rule == "vertex-rescale-budget"
    assert held.vertex_parallelism == held.current_vertex_parallelism
    assert "1 rescales in the last hour of 2" in " ".join(held.reasons)
    assert set(held.vertex_rules.values()) == {"keep-rescale-budget"}
    assert policy(max_rescales_per_h=3.0).propose_configuration(assessment(1_500.0), knowledge).scaleout == 2
    earlier = knowledge_with(FakeDag())
    earlier.record_rescale(3_600.0 - 3_700.0, 4)  # out of the last hour: the scale-in goes ahead
    down = policy(max_rescales_per_h=2.0).propose_configuration(assessment(1_500.0), earlier)
    assert down.vertex_parallelism == {"src": 1, "map": 2, "agg": 1}
    # a scale-out is never held; under a budget it is sized for the horizon, not the next 240 s
    rising = dataclasses.replace(assessment(4_500.0), forecast_rps=np.repeat([4_500.0, 9_500.0], [600, 300]))
    up = policy(scale_out_lookahead_s=240.0, max_rescales_per_h=2.0).propose_configuration(rising, knowledge)
    assert up.vertex_parallelism == {"src": 1, "map": 10, "agg": 5}


def test_with_a_rescale_price_a_scale_in_waits_until_it_saves_more_than_the_price():
    """Running 2/4/4 (4 TaskManagers); 1,500 rps needs 1/2/1: 2 TaskManagers saved over the 900 s horizon."""
    knowledge = knowledge_with(FakeDag())
    assert (
        policy(rescale_price_ws=1_700.0).propose_configuration(assessment(1_500.0), knowledge).scaleout == 2
    )
    held = policy(rescale_price_ws=1_900.0).propose_configuration(assessment(1_500.0), knowledge)
    assert held.rule == "vertex-rescale-not-worth-it"
    assert held.vertex_parallelism == held.current_vertex_parallelism
    assert set(held.vertex_rules.values()) == {"keep-not-worth-it"}
    assert "saves 1800 TaskManager-s over the horizon, less than a rescale's price of 1900" in " ".join(
        held.reasons
    )
    # a scale-in that frees no TaskManager saves the subtasks it sheds at their price (it was held for good)
    one = assessment(3_500.0)  # needs 1/4/2 where 2/4/4 runs: 4 slots either way, 3 subtasks shed
    assert policy(rescale_price_ws=1.0).propose_configuration(one, knowledge).rule == "vertex-current-valid"
    shed = {"subtask_price": 0.5}  # 1.5 TaskManagers: 1,350 TaskManager-s over the horizon
    down = policy(**shed, rescale_price_ws=1_300.0).propose_configuration(one, knowledge)
    assert down.vertex_parallelism == {"src": 1, "map": 4, "agg": 2}
    assert policy(**shed, rescale_price_ws=1_400.0).propose_configuration(one, knowledge).rule == (
        "vertex-rescale-not-worth-it"
    )


def test_with_a_rescale_price_a_scale_out_is_sized_for_the_rise_it_pays_to_carry_in_one_step():
    """4,500 rps for 600 s, then 9,500: sized for the next 240 s, 1/5/3 (5 TaskManagers) carries the first
    600 s and then a rescale to the horizon's 1/10/5 follows (5·600 + price + 10·300 TaskManager-s); sized
    for the horizon at once, 10·900. Below a price of 3,000 the step pays, above it the one rescale."""
    rising = dataclasses.replace(assessment(4_500.0), forecast_rps=np.repeat([4_500.0, 9_500.0], [600, 300]))
    knowledge = knowledge_with(FakeDag())
    steps = policy(scale_out_lookahead_s=240.0, rescale_price_ws=2_900.0).propose_configuration(
        rising, knowledge
    )
    assert steps.vertex_parallelism == {"src": 1, "map": 5, "agg": 3}
    once = policy(scale_out_lookahead_s=240.0, rescale_price_ws=3_100.0).propose_configuration(
        rising, knowledge
    )
    assert once.vertex_parallelism == {"src": 1, "map": 10, "agg": 5} and once.rule == "vertex-long-lived"
    assert "9000 TaskManager-s over the horizon, rescales included" in " ".join(once.reasons)
    # a rise that lasts 100 s of the horizon is not worth 10 TaskManagers from now on at the same price
    late = dataclasses.replace(rising, forecast_rps=np.repeat([4_500.0, 9_500.0], [800, 100]))
    stepped = policy(scale_out_lookahead_s=240.0, rescale_price_ws=3_100.0).propose_configuration(
        late, knowledge
    )
    assert stepped.vertex_parallelism == {"src": 1, "map": 5, "agg": 3}


def test_with_a_rescale_price_a_long_rise_starts_with_the_first_step_of_the_cheapest_sequence():
    """4,500 rps rising to 30,000 over an hour at a price of 1,200: charging everything after the first
    step at the horizon's configuration took 17 TaskManagers now (80,754 TaskManager-s with the steps
    after it); the cheapest sequence over the same candidates starts at 9 (75,810: 9, 13, 17, 21, 25 and
    30; an exhaustive search over them, written apart from the plan, found both). Over 900 s to 9,500 both
    rules take 7 TaskManagers, then 10."""
    knowledge = knowledge_with(FakeDag())
    priced = VertexPolicy(1, 64, 600.0, 60.0, scale_out_lookahead_s=240.0, rescale_price_ws=1_200.0)
    hour = dataclasses.replace(assessment(4_500.0), forecast_rps=np.linspace(4_500.0, 30_000.0, 3_600))
    long_rise = priced.propose_configuration(hour, knowledge)
    assert long_rise.scaleout == 9
    assert "75810 TaskManager-s over the horizon, rescales included" in " ".join(long_rise.reasons)
    short = dataclasses.replace(assessment(4_500.0), forecast_rps=np.linspace(4_500.0, 9_500.0, 900))
    assert priced.propose_configuration(short, knowledge).scaleout == 7


def test_latency_floors_raise_vertices_above_the_ds2_walk_and_invalidate_a_running_one_below():
    terms = LatencyTerms({"agg": 8}, slack_s=1.5, budget_s=math.inf, reasons=("latency: floors",))
    up = policy().propose_configuration(assessment(9_500.0), knowledge_with(FakeDag()), terms)
    assert up.vertex_parallelism["agg"] == 8 and up.vertex_rules["agg"] == "latency-floor"
    assert up.reasons[0] == "latency: floors"
    # 3,500 rps: the running 2/4/4 carries it and is kept, unless the target needs 6 map subtasks
    knowledge = knowledge_with(FakeDag())
    assert policy().propose_configuration(assessment(3_500.0), knowledge).rule == "vertex-current-valid"
    raised = policy().propose_configuration(
        assessment(3_500.0), knowledge, LatencyTerms({"map": 6}, 1.5, 0.0)
    )
    assert raised.vertex_parallelism["map"] == 6


def test_a_scale_in_costs_its_pause_and_waits_for_the_latency_budget():
    """1,500 rps on 4 slots: {1, 2, 1} runs at 75% after a 3 s pause, 1.5 s over a 1.5 s slack → 6 s over
    the target; a roomier {1, 3, 2} (50%) costs 3 s; nothing fits in 1 s."""
    knowledge = knowledge_with(FakeDag(), downtime_s=3.0)
    tight = policy().propose_configuration(assessment(1_500.0), knowledge, LatencyTerms({}, 1.5, 10.0))
    assert tight.vertex_parallelism == {"src": 1, "map": 2, "agg": 1}
    roomy = policy().propose_configuration(assessment(1_500.0), knowledge, LatencyTerms({}, 1.5, 4.0))
    assert roomy.vertex_parallelism == {"src": 1, "map": 3, "agg": 2}
    assert "its pause costs ~3 s over the latency target" in " ".join(roomy.reasons)
    waits = policy().propose_configuration(assessment(1_500.0), knowledge, LatencyTerms({}, 1.5, 1.0))
    assert waits.rule == "latency-spacing" and waits.vertex_parallelism == waits.current_vertex_parallelism


def test_a_configuration_that_no_longer_carries_the_load_grows_whatever_the_forecast():
    """4,100 rps now (above the running map's 4,000), 1,500 forecast: every candidate carries the average
    load (Daedalus), so the map grows to 5 subtasks instead of following the forecast down to 2."""
    falling = dataclasses.replace(assessment(1_500.0), workload_avg_rps=4_100.0)
    proposal = policy().propose_configuration(falling, knowledge_with(FakeDag()))
    assert proposal.vertex_parallelism == {"src": 1, "map": 5, "agg": 3}


def test_a_failing_configuration_is_not_shrunk_when_the_pause_would_cost_too_much():
    """The running 2/4/4 misses a latency floor of 3 sources, so it is no longer valid; at 1,500 rps the walk
    would take map and agg down, but after a pause at that size the job would be late longer than the 1 s
    the target allows: only the source grows, nothing comes down."""
    knowledge = knowledge_with(FakeDag())
    roomy = policy().propose_configuration(
        assessment(1_500.0), knowledge, LatencyTerms({"src": 3}, 1.5, 20.0)
    )
    assert roomy.vertex_parallelism["src"] == 3 and roomy.vertex_parallelism["map"] < 4
    kept = policy().propose_configuration(assessment(1_500.0), knowledge, LatencyTerms({"src": 3}, 1.5, 1.0))
    assert kept.vertex_parallelism == {"src": 3, "map": 4, "agg": 4}


def test_what_comes_down_carries_the_average_and_the_forecasts_upper_bound():
    """Before the forecaster's first model a falling load's linear trend runs to 0, and its upper bound
    keeps the window's peak: a scale-in is sized for the average load and that bound over the next loop."""
    knowledge = knowledge_with(FakeDag())
    assert policy().propose_configuration(assessment(500.0), knowledge).vertex_parallelism["map"] == 1
    fed = dataclasses.replace(assessment(500.0), workload_avg_rps=2_200.0)
    assert policy().propose_configuration(fed, knowledge).vertex_parallelism["map"] == 3
    bounded = dataclasses.replace(assessment(500.0), forecast_upper_rps=np.full(900, 2_500.0))
    assert policy().propose_configuration(bounded, knowledge).vertex_parallelism["map"] == 3


def test_a_surge_raises_every_vertex_at_once_even_inside_stabilization():
    """The running 2/4/4 carries 4,000 rps (map); 6,000 arrive over the last seconds against an upper bound
    of 4,500 forecast for them: sized for 6,000 plus the backlog and 3 s of arrivals drained in 120 s."""
    surging = dataclasses.replace(
        assessment(3_500.0, backlog=12_000.0), workload_recent_rps=6_000.0, expected_upper_rps=4_500.0
    )
    knowledge = knowledge_with(FakeDag(), last_rescale_s=3_600.0 - 30.0)
    proposal = policy().urgent(surging, knowledge)
    assert proposal.rule == "vertex-surge"
    assert proposal.vertex_parallelism == {"src": 2, "map": 7, "agg": 4}  # ⌈6,250 / 1,000⌉; none down
    decision = GuardedPlan(policy(), 1, 32, 180.0).decide(surging, knowledge)
    assert decision.rule == "vertex-surge" and decision.target_vertex_parallelism["map"] == 7
    assert "inside stabilization" in decision.reasons[-1]
    # the newest sample above the 15 s mean (a step half-way through it): sized for it, 8,000 + backlog
    stepping = dataclasses.replace(surging, workload_latest_rps=8_000.0)
    assert policy().urgent(stepping, knowledge).vertex_parallelism["map"] == 9  # ⌈8,300 / 1,000⌉
    foreseen = dataclasses.replace(surging, expected_upper_rps=6_500.0)  # within the forecast's bound
    assert policy().urgent(foreseen, knowledge) is None
    assert GuardedPlan(policy(), 1, 32, 180.0).decide(foreseen, knowledge).rule == "stabilization"


def test_the_recovery_bound_uses_the_per_vertex_downtime():
    fast = policy().propose_configuration(assessment(9_500.0, backlog=1e6), knowledge_with(FakeDag()))
    slow_knowledge = knowledge_with(FakeDag(), downtime_s=5_000.0)  # longer than the forecast horizon
    slow_knowledge.downtime.observe("out", 1.0)  # the reactive-mode model is not consulted
    slow = policy().propose_configuration(assessment(9_500.0, backlog=1e6), slow_knowledge)
    assert fast.rule == "vertex-long-lived"
    assert slow.rule == "vertex-max"


def test_the_decision_keeps_its_per_vertex_fields_in_the_audit_and_store():
    decision = Decision(
        60.0, 4, 10, "vertex-long-lived", ("x",),
        target_vertex_parallelism={"src": 1, "map": 10},
        current_vertex_parallelism={"src": 2, "map": 4},
        vertex_rules={"src": "ride-along-down", "map": "ds2-walk"},
    )  # fmt: skip
    assert decision.reconfigures and decision.action == "scale_out"
    assert Decision.from_dict(decision.to_dict()) == decision
    job = Decision(60.0, 4, 4, "current-valid")
    assert "target_vertex_parallelism" not in job.to_dict()
    same_taskmanagers = Decision(
        60.0, 4, 4, "r", target_vertex_parallelism={"a": 2}, current_vertex_parallelism={"a": 3}
    )
    assert same_taskmanagers.reconfigures and same_taskmanagers.action == "scale_in"


def test_only_per_vertex_rescales_teach_the_per_vertex_downtime_and_it_persists():
    from mape.vertex_knowledge import VertexWatch

    knowledge = knowledge_with(FakeDag())
    observation = Observation(
        120.0, 60.0, np.array([120.0]), np.array([1.0]), (), 0.0, 4, 100.0,
        job_graph=GRAPH,
        completed_rescales=(
            CompletedRescale(60.0, 63.2, "vertex", {"map": 8}),
            CompletedRescale(60.0, 95.0, "job"),
        ),
    )  # fmt: skip
    VertexWatch(0.1, 0.95).refine(observation, knowledge, assessment(1.0))
    state = knowledge.extensions[VERTEX]
    assert state.downtime.observations_s("out") == [pytest.approx(3.2)]
    assert state.downtime.observations_s("in") == []
    assert knowledge.downtime.observations_s("out") == []  # reactive mode's model untouched
    again = VertexKnowledge.from_dict(state.to_dict())
    assert again.downtime.observations_s("out") == [pytest.approx(3.2)] and again.graph == GRAPH


def test_a_saturated_core_teaches_nothing_of_the_cpu_per_busy_second():
    """A saturated TaskManager's CPU stops at saturation while its subtasks' records keep their cost: in
    the fit it would make them look cheaper."""
    from mape.vertex_knowledge import VertexWatch

    class Rates:
        def subtask_rate_rps(self, vertex_id, parallelism, index):
            return 1_000.0

    t = np.arange(5.0, 65.0, 5.0)

    def subtask(index: int, taskmanager: str, records_rps: float) -> SubtaskSeries:
        records = np.full(len(t), records_rps)
        return SubtaskSeries("map", index, taskmanager, t, records, records, records, 0 * t, 1000 - records)

    def worker(name: str, cpu: float) -> WorkerSeries:
        return WorkerSeries(name, t, np.full(len(t), cpu), np.full(len(t), 100.0))

    # tm-a: 0.5 predicted busy seconds at 0.1 + 0.5 · 0.85 cores (1 CPU per busy second);
    # tm-b: two subtasks, 1.5 predicted busy seconds, its core saturated at 0.95
    observation = Observation(
        120.0, 60.0, np.array([120.0]), np.array([1.0]),
        (worker("tm-a", 0.525), worker("tm-b", 0.95)), 0.0, 4, 600.0,
        job_graph=GRAPH,
        subtasks=(subtask(0, "tm-a", 500.0), subtask(1, "tm-b", 750.0), subtask(2, "tm-b", 750.0)),
    )  # fmt: skip
    knowledge = knowledge_with(Rates(), cpu_per_busy=math.nan)
    VertexWatch(0.1, 0.95).refine(observation, knowledge, assessment(1.0))
    state = knowledge.extensions[VERTEX]
    assert state.cpu_per_busy == pytest.approx(1.0)  # tm-b alone would read 0.67
    assert state.vertex_cpu_per_busy()["map"] == pytest.approx(1.0, rel=0.05)


def test_an_implausible_records_sample_teaches_nothing_of_the_cpu_per_busy_second():
    """One sample of 10^12 records/s on tm-a would predict its subtask busy for ~10^8 seconds a second:
    averaged in, the CPU per busy second fitted near 0, the floor, and every vertex looked almost free."""
    from mape.vertex_knowledge import VertexWatch

    class Rates:
        def subtask_rate_rps(self, vertex_id, parallelism, index):
            return 1_000.0

    t = np.arange(5.0, 65.0, 5.0)
    records = np.full(len(t), 500.0)
    records[3] = 1e12
    observation = Observation(
        120.0, 60.0, np.array([120.0]), np.array([1.0]),
        (WorkerSeries("tm-a", t, np.full(len(t), 0.525), np.full(len(t), 100.0)),), 0.0, 4, 500.0,
        job_graph=GRAPH,
        subtasks=(SubtaskSeries("map", 0, "tm-a", t, records, records, records, 0 * t, 1000 - records),),
    )  # fmt: skip
    knowledge = knowledge_with(Rates(), cpu_per_busy=math.nan)
    VertexWatch(0.1, 0.95).refine(observation, knowledge, assessment(1.0))
    assert knowledge.extensions[VERTEX].cpu_per_busy == pytest.approx(1.0)


def test_the_baselines_window_leaves_out_the_subtasks_a_scale_in_removed():
    """map runs at 4 after a scale-in from 6: the range query still returns subtasks 4 and 5 from before
    the restart, busier and with more records; summed in they would double the vertex's input."""
    from mape.vertex_knowledge import vertex_windows

    t = np.arange(5.0, 65.0, 5.0)

    def subtask(index: int, records_rps: float, busy_ms: float) -> SubtaskSeries:
        records = np.full(len(t), records_rps)
        busy = np.full(len(t), busy_ms)
        return SubtaskSeries("map", index, "tm-a", t, records, records, busy, 0 * t, 1000 - busy)

    running = [subtask(i, 250.0, 300.0) for i in range(4)]
    removed = [subtask(i, 800.0, 900.0) for i in (4, 5)]
    observation = Observation(
        120.0, 60.0, np.array([120.0]), np.array([1.0]), (), 0.0, 4, 1_000.0,
        job_graph=GRAPH, subtasks=(*running, *removed),
    )  # fmt: skip
    window = vertex_windows(observation)["map"]
    assert window.parallelism == 4
    assert window.records_in_rps == pytest.approx(1_000.0)
    assert window.busy_mean == pytest.approx(0.3) and window.busy_max == pytest.approx(0.3)


def _vertex_config(**twin) -> Config:
    return Config.model_validate(
        {
            "twin": {"workload": "builtin:sine", **twin},
            "scaling": {"granularity": "vertex"},
            "knowledge": {"path": ":memory:"},
        }
    )


def test_the_loop_rescales_single_vertices_through_the_vertex_target_and_learns_the_downtime():
    config = _vertex_config(topology="wordcount", initial_scaleout=2)
    world = make_twin(config)
    knowledge = Knowledge.fresh(knowledge_settings(config))
    loop = make_loop(config, world.source, world.target, knowledge, KnowledgeStore(":memory:"))
    executed = []
    now = 0.0
    while now < 900.0:
        now += 60.0
        world.twin.advance_to(now)
        result = loop.iterate(now)
        if result.executed:
            executed.append(result.decision)
    assert executed, "the sine's load needs more than 2 subtasks per vertex"
    first = executed[0]
    assert first.target_vertex_parallelism is not None and first.vertex_rules
    assert world.twin.rescales == len(executed)
    assert knowledge.extensions[VERTEX].rescales_learned >= 1
    assert knowledge.downtime.observations_s("out") == []  # no reactive-mode downtime learned from it
    knowledge.close()


def test_vertex_granularity_needs_the_per_vertex_model_and_the_twin_one_slot_per_taskmanager():
    with pytest.raises(ValueError, match=r"capacity\.model: dag"):
        Config.model_validate({"scaling": {"granularity": "vertex"}, "capacity": {"model": "job"}})
    with pytest.raises(ValueError, match="one slot"):
        Config.model_validate({"scaling": {"granularity": "vertex", "slots_per_taskmanager": 2}})


class HotKeyDag(FakeDag):
    """`agg`'s last subtask holds a hot key: half of the vertex's records at any parallelism."""

    def shares(self, graph, vertex_id, parallelism):
        if vertex_id != "agg" or parallelism == 1:
            return super().shares(graph, vertex_id, parallelism)
        return np.append(np.full(parallelism - 1, 0.5 / (parallelism - 1)), 0.5)

    def capacity_curve(self, graph, vertex_id, ratio, top):
        if vertex_id != "agg":
            return super().capacity_curve(graph, vertex_id, ratio, top)
        limits = [self.rates["agg"] / self.shares(graph, "agg", p).max() for p in range(1, top + 1)]
        return np.array(limits), ["observed"] * top


def test_vertices_below_the_slot_count_leave_the_hot_subtasks_slot_to_it():
    sizing = Sizing(GRAPH, HotKeyDag(rates={"src": 8_000.0, "map": 1_500.0, "agg": 3_000.0}), 32, 1.0)
    config = sizing.configuration(3_000.0, {})
    assert "slot-placement" in config.rules.values()
    assert (
        config.capacity_rps >= 3_000.0
        and 3_000.0 * sizing.slot_cpu_per_record(config.parallelism) <= SLOT_CPU
    )
    # the fewest slots of any configuration that carries the rate (exhaustive search)
    fewest = min(
        sizing.evaluate(dict(zip(("src", "map", "agg"), p, strict=True))).slots
        for p in itertools.product(range(1, 9), repeat=3)
        if sizing.evaluate(dict(zip(("src", "map", "agg"), p, strict=True))).capacity_rps >= 3_000.0
    )
    assert config.slots == fewest == 4
    hot_slot = config.parallelism["agg"] - 1
    assert config.parallelism["src"] <= hot_slot or config.parallelism["map"] <= hot_slot


def test_a_vertex_that_waits_costs_its_slot_less_cpu_than_one_that_computes():
    cpu_bound = Sizing(GRAPH, FakeDag(), 32, cpu_per_busy=1.0).configuration(7_500.0, {})
    waiting_map = Sizing(GRAPH, FakeDag(), 32, cpu_per_busy={"src": 1.0, "map": 0.05, "agg": 1.0})
    assert waiting_map.configuration(7_500.0, {}).slots < cpu_bound.slots


def test_the_vertex_cpu_per_busy_second_is_told_apart_where_slots_hold_different_mixes():
    from mape.vertex_knowledge import _vertex_shares

    # a computing vertex (1.0 CPU per busy second) and a sink waiting on its store (0.1)
    busy = {"tm-0": {"work": 0.6, "sink": 0.3}, "tm-1": {"work": 0.2, "sink": 0.9}, "tm-2": {"sink": 0.8}}
    cpu = {tm: 1.0 * b.get("work", 0.0) + 0.1 * b["sink"] for tm, b in busy.items()}
    shares = _vertex_shares(busy, cpu, common=0.5)
    assert shares["work"] > 0.8 and shares["sink"] < 0.2  # pulled a little towards the common 0.5
    state = VertexKnowledge.fresh(3.0)
    state.graph, state.cpu_per_busy = GRAPH, 0.4
    state.learn_vertex_cpu({"map": 0.2})
    assert state.vertex_cpu_per_busy() == {"src": 0.4, "map": pytest.approx(0.2), "agg": 0.4}
    assert VertexKnowledge.from_dict(state.to_dict()).cpu_per_busy_by_vertex == {"map": pytest.approx(0.2)}


def test_a_saturated_job_carries_what_it_shows_and_a_backlog_that_does_not_drain_is_no_reason_to_wait():
    knowledge = knowledge_with(FakeDag(), last_rescale_s=3_500.0)
    # rescaled 100 s ago; the model says the running configuration (2, 4, 4) carries 4,000 rps
    calm = policy().propose_configuration(assessment(3_500.0), knowledge)
    assert calm.rule == "vertex-only-if-necessary"
    saturated = dataclasses.replace(
        assessment(3_500.0, backlog=600_000.0), capacities_rps={4: 3_000.0}, capacity_method="saturated"
    )
    proposal = policy().propose_configuration(saturated, knowledge)
    assert proposal.rule != "vertex-only-if-necessary" and proposal.vertex_parallelism["map"] > 4


def test_a_plan_that_keeps_every_vertex_is_a_hold_with_several_slots_per_taskmanager():
    """The decision compared the TaskManagers it wants (2: 4 slots at 2 a TaskManager) with the widest
    vertex (4): a scale-in, which went out as a whole-job `scale_to(2)`, was counted as a rescale and
    followed until the readiness timeout, every iteration the plan kept the configuration."""
    plan = GuardedPlan(policy(slots_per_taskmanager=2), 1, 32, 600.0)
    decision = plan.decide(assessment(3_500.0), knowledge_with(FakeDag()))
    assert decision.rule == "vertex-current-valid" and not decision.changes_vertices
    assert (decision.current_scaleout, decision.target_scaleout, decision.action) == (2, 2, "hold")


def _running(src: int, map_: int, agg: int) -> JobGraph:
    return JobGraph(
        (
            JobVertex("src", "source", src, 128),
            JobVertex("map", "map", map_, 128),
            JobVertex("agg", "agg", agg, 128),
        ),
        GRAPH.edges,
    )


def test_a_surge_brings_a_vertex_above_what_it_may_run_at_down_to_it():
    """None comes down in a surge, except to where a vertex may run: agg at 4 subtasks on 3 slots allowed
    (the TaskManagers allowed were lowered) cannot be kept, and a PUT of it is what Flink refuses. A surge
    in which no vertex can grow is none: lowering one alone would restart the job for less capacity."""
    policy3 = VertexPolicy(1, 3, 600.0, 60.0)
    for running, grows in ((_running(1, 2, 4), True), (_running(3, 3, 4), False)):
        knowledge = knowledge_with(FakeDag())
        knowledge.extensions[VERTEX].graph = running
        surging = dataclasses.replace(
            assessment(3_500.0, backlog=12_000.0, graph=running),
            workload_recent_rps=6_000.0,
            expected_upper_rps=4_500.0,
        )
        proposal = policy3.urgent(surging, knowledge)
        if not grows:
            assert proposal is None
            continue
        assert proposal.rule == "vertex-surge" and proposal.vertex_parallelism["map"] == 3
        assert proposal.vertex_parallelism["agg"] == 3 and proposal.vertex_rules["agg"] == "max-parallelism"
