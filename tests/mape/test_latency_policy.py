"""The latency objective: Elasticutor's greedy per vertex as a floor under the Daedalus plan, the learned
correction, the rescale spacing, and the hot-key limit (issue 15)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from capacity.latency import Station, network_latency_s
from mape.knowledge import Knowledge
from mape.latency_policy import (
    LATENCY,
    LatencyKnowledge,
    LatencyLearning,
    LatencyObjective,
    latency_need,
    latency_of,
    shown_s,
    vertex_latency_terms,
)
from mape.proactive import ProactivePolicy
from mape.skew import SKEW, SkewKnowledge, VertexSkew, hot_key_group
from messages.types import CAPACITY_RESOLUTION, Assessment, Observation, VertexAssessment

NOW_S = 50_000.0


def _vertex(name: str, rate_rps: float, ratio: float = 1.0, keyed: bool = False) -> VertexAssessment:
    return VertexAssessment(
        vertex_id=name,
        name=name,
        parallelism=4,
        keyed=keyed,
        input_ratio=ratio,
        selectivity=1.0,
        true_rate_rps=rate_rps,
        utilization=0.5,
        backpressured=0.0,
        skew=1.0,
        capacity_rps=math.inf,
    )


def _assessment(
    forecast_rps: float,
    vertices: tuple[VertexAssessment, ...],
    current: int = 4,
    per_worker_rps: float = 1_000.0,
    recovery_s: float = 60.0,
) -> Assessment:
    capacities = {n: n * per_worker_rps for n in range(1, 19)}
    return Assessment(
        time_s=NOW_S,
        current_scaleout=current,
        workload_avg_rps=forecast_rps,
        workload_max_rps=forecast_rps,
        backlog_records=0.0,
        capacities_rps=capacities,
        capacity_sources=dict.fromkeys(capacities, "observed"),
        forecast_rps=np.full(900, float(forecast_rps)),
        recovery_s=dict.fromkeys(capacities, recovery_s),
        vertices=vertices,
    )


def _hot(assessment: Assessment, count: VertexSkew, service_rps: float) -> Assessment:
    """The assessment with the capacities of a model that knows the hot key group: the count vertex's hot
    subtask limits the job."""
    capacities = {n: service_rps / count.hot_subtask_share(n) for n in assessment.capacities_rps}
    return replace(assessment, capacities_rps=capacities)


def _objective(target_ms: float) -> LatencyObjective:
    return LatencyObjective(ProactivePolicy(1, 18, 600.0, 60.0), target_ms / 1000.0, 18)


def test_the_need_is_the_largest_vertex_need_of_the_greedy():
    # the chain: e1 λ = 1,000 μ = 200, e2 λ = 2,000 (selectivity 2) μ = 500 → (8, 6) for 10 ms;
    # on separate cores the job needs 8, but reactive mode puts subtask i of both on TaskManager i, whose
    # one core then carries 5/n + 4/n of a core's work: 10 TaskManagers
    vertices = (_vertex("e1", 200.0), _vertex("e2", 500.0, ratio=2.0))
    need = latency_need(_assessment(1_000, vertices), Knowledge(), 10e-3, 18)
    assert "e1=8, e2=6" in need.reasons[0] and need.scaleout == 10
    relaxed = latency_need(_assessment(1_000, vertices), Knowledge(), 12.5e-3, 18)
    assert "e1=7, e2=5" in relaxed.reasons[0]
    # where the target, not the cores, binds, the greedy's need is the job's: M/M/k λ = 9,000, μ = 1,000
    single = (_vertex("op", 1_000.0),)
    assert latency_need(_assessment(9_000, single), Knowledge(), 1.2e-3, 18).scaleout == 12


def test_the_plan_takes_no_scaleout_below_the_latency_need():
    # throughput alone: 1,000 rps per worker carries 9,000 rps at 10 workers; 1.2 ms needs 12
    a = _assessment(9_000, (_vertex("op", 1_000.0),), current=4)
    throughput_only, _, _ = ProactivePolicy(1, 18, 600.0, 60.0).propose(a, Knowledge())
    target, _, reasons = _objective(1.2).propose(a, Knowledge())
    assert throughput_only == 10 and target == 12
    assert reasons[0].startswith("latency:")


def test_the_recovery_bound_still_applies():
    vertices = (_vertex("e1", 200.0), _vertex("e2", 500.0, ratio=2.0))
    a = _assessment(1_000, vertices, current=4, per_worker_rps=400.0, recovery_s=900.0)
    target, rule, _ = _objective(10.0).propose(a, Knowledge())
    assert (target, rule) == (18, "max-scaleout")  # no candidate recovers within 600 s


def test_the_learned_offset_tightens_the_target():
    vertices = (_vertex("e1", 200.0), _vertex("e2", 500.0, ratio=2.0))
    knowledge = Knowledge()
    state = latency_of(knowledge)
    for _ in range(5):  # the job always shows 2.5 ms more than the model (network, fetches)
        state.learn(10e-3, 12.5e-3)
    assert state.corrected_s(10e-3) == pytest.approx(12.5e-3)
    assert state.summary()["latency_model_raw_error_pct"] == pytest.approx(20.0)
    assert state.summary()["latency_model_corrected_error_pct"] == pytest.approx(0.0, abs=1e-6)
    # 12.5 ms corrected = 10 ms of model latency → (8, 6) instead of (7, 5)
    assert "e1=8, e2=6" in latency_need(_assessment(1_000, vertices), knowledge, 12.5e-3, 18).reasons[0]


def test_a_target_below_the_fixed_latency_cannot_be_met_by_scaling():
    knowledge = Knowledge()
    for _ in range(3):
        latency_of(knowledge).learn(1e-3, 0.501)
    need = latency_need(_assessment(1_000, (_vertex("e1", 200.0),)), knowledge, 0.4, 18)
    assert need.scaleout is None and "no scale-out meets it" in need.reasons[0]


@pytest.mark.parametrize("target_s", [0.5005, 0.502])
def test_a_target_the_service_times_alone_exceed_sets_no_floor_and_no_maximum(target_s):
    # the job shows 0.5 s beside the queues and its service times add 9 ms: a target 0.5-2 ms above
    # the fixed latency is out of reach at any parallelism, not a reason to take every vertex to 18
    vertices = (_vertex("e1", 200.0), _vertex("e2", 500.0, ratio=2.0))
    knowledge = Knowledge()
    for _ in range(5):
        latency_of(knowledge).learn(1e-3, 0.501)
    need = latency_need(_assessment(1_000, vertices), knowledge, target_s, 18)
    assert need.scaleout is None and "no scale-out meets it" in need.reasons[0]
    terms = vertex_latency_terms(_assessment(1_000, vertices), knowledge, target_s, 18, 0.99)
    assert terms.floors == {} and "below the job's latency without queueing" in terms.reasons[0]
    assert vertex_latency_terms(_assessment(1_000, vertices), knowledge, 2.0, 18, 0.99).floors == {
        "e1": 6,
        "e2": 5,
    }


def test_the_correction_follows_a_line_once_the_model_latency_spreads():
    state = LatencyKnowledge()
    for model_s in np.linspace(0.01, 0.2, 20):
        state.learn(float(model_s), 0.4 + 2.0 * float(model_s))
    assert state.corrected_s(0.1) == pytest.approx(0.6)
    assert state.model_target_s(1.0) == pytest.approx(0.3)
    restored = LatencyKnowledge.from_dict(state.to_dict())
    assert restored.corrected_s(0.1) == pytest.approx(0.6)


def test_a_scale_in_waits_until_rescales_are_rare_enough_for_the_target():
    vertices = (_vertex("e1", 2_000.0),)
    a = _assessment(2_000, vertices, current=10)
    recent = Knowledge(last_rescale_s=NOW_S - 1_200)
    target, rule, reasons = _objective(2_000.0).propose(a, recent)
    assert (target, rule) == (10, "latency-spacing")  # 60 s recovery / 1% → one rescale per 6,000 s
    assert "6000 s" in reasons[-1]
    target, _, _ = _objective(2_000.0).propose(a, Knowledge(last_rescale_s=NOW_S - 7_000))
    assert target < 10


def test_per_vertex_the_greedy_gives_each_vertex_its_floor_and_the_target_a_pause_budget():
    vertices = (_vertex("e1", 200.0), _vertex("e2", 500.0, ratio=2.0))
    knowledge = Knowledge(last_rescale_s=NOW_S - 1_000)
    for _ in range(3):  # the job shows 0.5 s beside the queues: 1.5 s of a 2 s target are left for a pause
        latency_of(knowledge).learn(1e-3, 0.501)
    terms = vertex_latency_terms(_assessment(1_000, vertices), knowledge, 2.0, 18, 0.99)
    assert terms.slack_s == pytest.approx(1.5)
    assert terms.budget_s == pytest.approx(10.0)  # 1% of the 1,000 s since the last rescale
    assert terms.floors == {"e1": 6, "e2": 5}  # the stable start already meets a 1.5 s model target
    tight = vertex_latency_terms(_assessment(1_000, vertices), Knowledge(), 10e-3, 18, 0.99)
    assert tight.floors == {"e1": 8, "e2": 6}  # the chain: no shared core to fit per vertex
    assert tight.budget_s == math.inf  # never rescaled
    capped = vertex_latency_terms(_assessment(1_000, vertices), knowledge, 2.0, 18, 0.99, 600.0)
    assert capped.budget_s == pytest.approx(6.0)  # counted over at most 600 s


def test_hot_key_group_estimate_puts_the_excess_in_one_group():
    # 128 key groups at parallelism 4 (32 each): one group carries 25% on top of even loads
    loads = np.full(128, 0.75 / 127)
    loads[5] = 0.25
    records = np.bincount(np.arange(128) * 4 // 128, weights=loads, minlength=4) * 10_000
    hot, typical = hot_key_group(records, 128)
    assert hot == pytest.approx(0.25, abs=1e-9)
    assert typical == pytest.approx(0.75 / 127)


def test_a_persistent_hot_key_stops_the_scale_out_and_names_the_skew():
    knowledge = Knowledge()
    skew = knowledge.extensions[SKEW] = SkewKnowledge()
    skew.vertices["count"] = VertexSkew(
        "count", 8, 128, 2.0, 2.0, windows_over=5, hot_group_share=0.3, typical_group_share=0.7 / 127
    )
    # the hot subtask carries ≥ 30% of 10,000 rps = 3,000 rps; one subtask processes 2,500: never stable
    vertices = (_vertex("parse", 5_000.0), _vertex("count", 2_500.0, keyed=True))
    a = _hot(_assessment(10_000, vertices, current=8), skew.vertices["count"], 2_500.0)
    target, rule, reasons = _objective(2_000.0).propose(a, knowledge)
    useful = skew.vertices["count"].useful_parallelism(18)
    assert useful == a.most_capacity_scaleout(1, 18)  # the estimate and the capacities agree here
    assert rule == "hot-key-limit" and target == max(useful, 3) < 18
    assert any("hottest key group carries ~30%" in r for r in reasons)
    # the useful parallelism is where the hot subtask's share stops falling
    shares = [skew.vertices["count"].hot_subtask_share(p) for p in range(1, 19)]
    assert shares[useful - 1] <= min(shares) * (1 + CAPACITY_RESOLUTION) < shares[useful - 2]


def test_without_a_persistent_skew_an_infeasible_load_goes_to_the_max():
    vertices = (_vertex("count", 2_500.0, keyed=True),)
    target, _, reasons = _objective(2_000.0).propose(_assessment(100_000, vertices, current=8), Knowledge())
    assert target == 18 and any("target not met" in r for r in reasons)


def test_unknown_rates_leave_the_recovery_objective_in_charge():
    a = _assessment(3_500, (_vertex("e1", math.nan),), current=4)
    target, _, reasons = _objective(2_000.0).propose(a, Knowledge())
    assert target == ProactivePolicy(1, 18, 600.0, 60.0).propose(a, Knowledge())[0]
    assert "true rate known" in reasons[0]


def test_the_knowledge_state_round_trips():
    skew = SkewKnowledge()
    skew.vertices["v"] = VertexSkew("count", 6, 128, 1.5, math.nan, 4, 0.2, 0.006)
    again = SkewKnowledge.from_dict(skew.to_dict())
    assert again.vertices["v"].persistent and math.isnan(again.vertices["v"].records_imbalance)
    saved = skew.to_dict()
    saved["v"]["a_field_of_a_later_version"] = 1  # an older daemon still loads a newer knowledge store
    assert SkewKnowledge.from_dict(saved).vertices["v"].hot_group_share == 0.2
    assert LATENCY == "latency"


def test_vertices_sharing_a_taskmanagers_core_need_more_workers_than_each_alone():
    # two vertices with λ/μ = 2.5 each: alone each is stable at 3 subtasks, together one core per
    # TaskManager carries 5 / n of a core's work → 6 TaskManagers
    vertices = (_vertex("parse", 4_000.0), _vertex("count", 4_000.0))
    need = latency_need(_assessment(10_000, vertices), Knowledge(), 2.0, 18)
    assert "parse=3, count=3" in need.reasons[0]
    assert need.scaleout == 6 and "share each TaskManager's core" in need.reasons[0]


def test_a_hot_key_that_saturates_its_core_stops_at_the_useful_parallelism():
    knowledge = Knowledge()
    skew = knowledge.extensions[SKEW] = SkewKnowledge()
    skew.vertices["count"] = VertexSkew(
        "count", 8, 128, 2.0, 2.0, windows_over=5, hot_group_share=0.3, typical_group_share=0.7 / 127
    )
    # alone the hot subtask is stable (30% of 10,000 = 3,000 < 3,500 rps), but the parse subtask on its
    # TaskManager adds 10,000 / n / 5,000 of the core
    vertices = (_vertex("parse", 5_000.0), _vertex("count", 3_500.0, keyed=True))
    a = _hot(_assessment(10_000, vertices, current=8), skew.vertices["count"], 3_500.0)
    target, rule, reasons = _objective(2_000.0).propose(a, knowledge)
    assert rule == "hot-key-limit" and target == skew.vertices["count"].useful_parallelism(18) < 18
    assert any("hot subtask's core" in r for r in reasons)


def test_a_hot_bottleneck_stops_the_recovery_plan_where_capacity_stops_growing():
    knowledge = Knowledge()
    skew = knowledge.extensions[SKEW] = SkewKnowledge()
    skew.vertices["count"] = VertexSkew(
        "count", 8, 128, 2.0, 2.0, windows_over=5, hot_group_share=0.3, typical_group_share=0.7 / 127
    )
    # a huge backlog: no candidate recovers within the target, so Daedalus falls back to the most capacity
    a = replace(
        _assessment(5_000, (_vertex("count", 20_000.0, keyed=True),), current=8, recovery_s=5_000.0),
        bottleneck_vertex="count",
    )
    hot = _hot(a, skew.vertices["count"], 20_000.0)
    useful = skew.vertices["count"].useful_parallelism(18)
    assert ProactivePolicy(1, 18, 600.0, 60.0).propose(hot, knowledge)[:2] == (useful, "max-scaleout")
    assert _objective(2_000.0).propose(hot, knowledge)[0] == useful
    # capacities that keep growing to 18 (no hot key in them): the estimate does not overrule them
    assert _objective(2_000.0).propose(a, knowledge)[0] == 18


def test_the_per_vertex_model_decides_where_the_hot_subtask_stops_gaining():
    knowledge = Knowledge()
    skew = knowledge.extensions[SKEW] = SkewKnowledge()
    skew.vertices["count"] = VertexSkew(
        "count", 8, 128, 2.0, 2.0, windows_over=5, hot_group_share=0.3, typical_group_share=0.7 / 127
    )
    # the estimate (other key groups even) stops at 16; the capacities, fitted on the real key-group
    # loads, still see 17 gain 4% and 18 nothing more: they decide
    capacities = {n: 8_000.0 + 100.0 * min(n, 17) + (300.0 if n >= 17 else 0.0) for n in range(1, 19)}
    a = replace(
        _assessment(5_000, (_vertex("count", 20_000.0, keyed=True),), current=8, recovery_s=5_000.0),
        bottleneck_vertex="count",
        capacities_rps=capacities,
    )
    assert skew.vertices["count"].useful_parallelism(18) == 16
    target, rule, reasons = _objective(2_000.0).propose(a, knowledge)
    assert (target, rule) == (17, "max-scaleout")
    assert any("beyond 17 more workers add < 1% capacity" in r for r in reasons)


def test_a_p99_target_reads_the_windows_99th_percentile_and_keeps_its_own_correction():
    samples = np.r_[np.full(98, 500.0), 5_000.0, 5_000.0, np.nan]  # ms: two slow seconds in 100, a gap
    assert shown_s(samples, "mean") == pytest.approx(0.59)
    assert shown_s(samples, "p99") == pytest.approx(5.0)
    assert math.isnan(shown_s(np.full(3, np.nan), "p99"))
    knowledge = Knowledge()
    latency_of(knowledge, "mean").learn(0.1, 0.6)
    assert latency_of(knowledge).offset_s == pytest.approx(0.5)  # no statistic asked: the one stored
    p99 = latency_of(knowledge, "p99")  # a mean's correction says nothing about the p99: dropped
    assert p99.stat == "p99" and p99.fit.n == 0
    p99.learn(0.1, 1.6)
    again = LatencyKnowledge.from_dict(p99.to_dict())
    assert again.stat == "p99" and again.offset_s == pytest.approx(1.5)


def _window(latency_ms: np.ndarray | None, uptime_s: float = 10_000.0) -> Observation:
    seconds = np.arange(NOW_S - 60, NOW_S)
    return Observation(NOW_S, 60.0, seconds, np.full(60, 500.0), (), 0.0, 4, uptime_s, latency_ms=latency_ms)


def test_steady_windows_teach_the_correction_and_every_window_reports_the_latency():
    vertices = (_vertex("e1", 200.0), _vertex("e2", 500.0, ratio=2.0))  # 4 subtasks each at 500 rps
    model_ms = 1000 * network_latency_s([Station("e1", 500, 200), Station("e2", 1_000, 500)], [4, 4], 500)
    knowledge, learning, steady = Knowledge(), LatencyLearning(), _assessment(500, vertices)

    first = learning.refine(_window(np.full(60, 50.0)), knowledge, steady).latency
    assert (first.stat, first.shown_ms, first.learned_from, first.windows) == ("mean", 50.0, True, 1)
    assert first.model_ms == pytest.approx(model_ms, abs=1e-3)
    assert first.corrected_ms == first.model_ms  # nothing learned before this window
    assert first.raw_error_pct == pytest.approx(100 * (50 - model_ms) / 50, abs=0.01)
    assert first.offset_ms == pytest.approx(50 - model_ms, abs=1e-3)

    second = learning.refine(_window(np.full(60, 50.0)), knowledge, steady).latency
    assert second.corrected_ms == pytest.approx(50.0) and second.corrected_error_pct == pytest.approx(0.0)

    catching_up = replace(steady, backlog_records=10 * 500.0)
    for window, assessment in (
        (_window(np.full(60, 900.0)), catching_up),  # a backlog: queues the model does not describe
        (_window(np.full(60, 900.0), uptime_s=30.0), steady),  # a restart's catch-up in the window
        (_window(None), steady),  # the job's latency is not read
    ):
        seen = learning.refine(window, knowledge, assessment).latency
        assert not seen.learned_from and seen.windows == 2, seen
    assert seen.shown_ms is None and seen.corrected_ms == pytest.approx(50.0)
    garbled = learning.refine(_window(np.full(60, 1e15)), knowledge, steady).latency  # no steady reading
    assert not garbled.learned_from and garbled.windows == 2 and garbled.corrected_ms == pytest.approx(50.0)


def test_two_vertices_of_one_name_each_get_their_own_floor():
    """Flink allows two un-chained `Map`s: keyed by name, one lost its floor."""
    slow = replace(_vertex("Map", 200.0), vertex_id="v-slow")  # 1,000 rps at 200 per subtask: 6 at least
    fast = replace(_vertex("Map", 5_000.0), vertex_id="v-fast")
    terms = vertex_latency_terms(_assessment(1_000, (slow, fast)), Knowledge(), 50e-3, 18, 0.99)
    assert terms.floors == {"v-slow": 6, "v-fast": 1}


@pytest.mark.parametrize(
    "stored",
    [
        {"residuals": ["x", None, 0.002], "raw": [True, 0.1], "corrected": [float("nan"), 0.05]},
        {"fit": {"n": 10**9, "mean_x": 0.01, "mean_y": 1e6, "m2_x": 1e3, "m2_y": 1e3, "c_xy": 1e3}},
        {
            "residuals": [1e6, 1e6, 0.002],
            "raw": [0.1],
            "corrected": [0.05],
        },  # its median read every target unreachable
    ],
    ids=["lists", "fit", "residuals"],
)
def test_a_damaged_stored_correction_is_refused_or_cleaned(stored):
    """A string in a list raised from every iteration's median; a fit of shown latencies of 10^6 s made
    every target read as unreachable."""
    try:
        knowledge = LatencyKnowledge.from_dict(stored)
    except ValueError:
        assert "fit" in stored  # the part starts fresh
        return
    assert (knowledge.residuals, knowledge.raw_errors, knowledge.corrected_errors) == ([0.002], [0.1], [0.05])
    assert math.isfinite(knowledge.offset_s)


def test_the_latency_need_floors_every_memory_level_not_only_the_current_one():
    """Over the memory-aware policy, a cheaper level's 4 workers were taken where the latency needed 6."""
    from tests.memory.test_memory_policy import _assessment as memory_assessment
    from tests.memory.test_memory_policy import _knowledge, _policy

    others = {1: {n: n * 12_000.0 for n in range(1, 13)}}
    a = memory_assessment(average=35_000.0, peak=45_000.0, hit_rate=0.95, latency_ns=5e4, others=others)
    a = replace(a, vertices=(_vertex("lookup", 10_000.0),))
    need = latency_need(a, _knowledge(), 0.2e-3, 12).scaleout
    proposal = LatencyObjective(_policy(), 0.2e-3, 12).propose_configuration(a, _knowledge())
    assert need == 6 and proposal.scaleout >= need


def test_the_job_level_latency_objective_keeps_the_surge_rule_inside_stabilization():
    """Wrapped, the proactive policy's surge rule was not found: a surge 90 s after a rescale waited for the
    stabilization window to end, where the recovery objective scales out at once."""
    from mape.plan import GuardedPlan

    surging = replace(
        _assessment(3_500, (_vertex("op", 1_000.0),), current=4),
        workload_recent_rps=7_000.0,
        workload_latest_rps=7_000.0,
        expected_upper_rps=4_000.0,
    )
    knowledge = Knowledge(last_rescale_s=NOW_S - 90)
    policy = LatencyObjective(ProactivePolicy(1, 18, 600.0, 60.0), 2.0, 18)
    decision = GuardedPlan(policy, 1, 18, 180.0).decide(surging, knowledge)
    assert decision.rule == "surge" and decision.target_scaleout >= 8  # 7,000 rps at 1,000 a worker


def test_before_the_latency_is_read_the_slack_says_it_assumed_none():
    """Without a reading the job's own latency is unknown: the pause is priced as if it were 0 (the whole
    target left), and the audit says so; once read, the slack is what is left of the target."""
    terms = vertex_latency_terms(_assessment(1_000, (_vertex("e1", 200.0),)), Knowledge(), 2.0, 18, 0.99)
    assert terms.slack_s == 2.0 and "latency not read yet: taken as 0" in terms.reasons[-1]
    learned = Knowledge()
    learned.extensions[LATENCY] = LatencyKnowledge()
    for _ in range(3):
        learned.extensions[LATENCY].learn(0.01, 0.51)
    read = vertex_latency_terms(_assessment(1_000, (_vertex("e1", 200.0),)), learned, 2.0, 18, 0.99)
    assert read.slack_s == pytest.approx(1.5, abs=0.01) and "taken as 0" not in read.reasons[-1]
