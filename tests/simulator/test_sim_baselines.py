"""Baseline policies: one behaviour of each rule per test, on hand-made assessments and on the twin."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import structlog

from config.schema import Config
from daemon.build import knowledge_settings, make_loop, make_plan
from mape.knowledge import Knowledge
from mape.knowledge_store import KnowledgeStore
from messages.types import Assessment
from simulator.baselines import Ds2Policy, FlinkOperatorPolicy, HpaPolicy, oracle_workers
from simulator.baselines.ds2 import true_rates_rps
from simulator.baselines.flink_operator import OperatorSettings, target_capacity_rps
from simulator.baselines.oracle import fewest_workers_with_rescales
from simulator.metrics import TwinMetricsSource, TwinScalingTarget
from simulator.params import TwinParams
from simulator.score import floor_avg_workers, floor_avg_workers_within_budget
from simulator.twin import Twin


def _assessment(
    time_s: float = 1000.0,
    current: int = 4,
    cpu: float = math.nan,
    average_rps: float = 0.0,
    backlog: float = 0.0,
    throughputs: tuple[float, ...] = (),
    busy: tuple[float, ...] = (),
) -> Assessment:
    return Assessment(
        time_s=time_s,
        current_scaleout=current,
        workload_avg_rps=average_rps,
        workload_max_rps=average_rps,
        backlog_records=backlog,
        capacities_rps={},
        capacity_sources={},
        cpu_utilization=cpu,
        worker_throughput_rps=throughputs,
        worker_busy_ratio=busy,
    )


# ------------------------------------------------------------------------------------------------ HPA
def test_hpa_holds_while_the_usage_ratio_is_within_the_tolerance():
    hpa = HpaPolicy(0.8)
    target, rule, _ = hpa.propose(_assessment(cpu=0.87), Knowledge())  # ratio 1.0875 ≤ 1.1
    assert (target, rule) == (4, "hpa-hold")
    target, rule, _ = hpa.propose(_assessment(time_s=1015, cpu=0.89), Knowledge())  # 1.1125 > 1.1
    assert (target, rule) == (5, "hpa-scale-up")


def test_hpa_scales_up_to_ceil_of_current_times_ratio_without_waiting():
    hpa = HpaPolicy(0.8)
    hpa.propose(_assessment(time_s=1000, current=10, cpu=0.2), Knowledge())  # a low recommendation first
    target, rule, _ = hpa.propose(_assessment(time_s=1015, current=10, cpu=0.96), Knowledge())
    assert (target, rule) == (math.ceil(10 * 0.96 / 0.8), "hpa-scale-up")


def test_hpa_scale_up_is_limited_to_double_or_plus_four_per_period():
    target, _, reasons = HpaPolicy(0.1).propose(_assessment(current=3, cpu=0.9), Knowledge())
    assert target == 7  # ceil(3 × 9) = 27, limited to max(2 × 3, 3 + 4)
    assert any("scale-up rate" in r for r in reasons)


def test_hpa_scales_down_only_to_the_highest_recommendation_of_the_last_five_minutes():
    hpa = HpaPolicy(0.8)
    assert hpa.propose(_assessment(time_s=0, current=8, cpu=0.78), Knowledge())[:2] == (8, "hpa-hold")
    target, rule, _ = hpa.propose(_assessment(time_s=15, current=8, cpu=0.2), Knowledge())  # recommends 2
    assert (target, rule) == (8, "hpa-stabilized")  # the 8 recommended at 0 s is in the window
    assert hpa.propose(_assessment(time_s=299, current=8, cpu=0.2), Knowledge())[0] == 8
    target, rule, _ = hpa.propose(_assessment(time_s=300, current=8, cpu=0.2), Knowledge())
    assert (target, rule) == (2, "hpa-scale-down")  # 5 minutes on, only recommendations of 2 remain


def test_hpa_holds_without_cpu_metrics():
    target, rule, _ = HpaPolicy(0.85).propose(_assessment(cpu=math.nan), Knowledge())
    assert (target, rule) == (4, "hpa-no-metrics")


def test_hpa_divides_the_cpu_usage_by_the_request_so_a_burstable_worker_exceeds_one_hundred_percent():
    # load 0.8 of a 2-core limit is 1.6 cores: 160 % of a 1-core request, 1.88 × the 85 % target
    target, rule, reasons = HpaPolicy(0.85, request_per_load=2.0).propose(
        _assessment(current=6, cpu=0.8), Knowledge()
    )
    assert (target, rule) == (math.ceil(6 * 1.6 / 0.85), "hpa-scale-up")
    assert "CPU 160.0% of the request" in reasons[0]
    # request = limit: the same worker shows 80 %, within the tolerance of 85 %
    assert HpaPolicy(0.85).propose(_assessment(current=6, cpu=0.8), Knowledge())[:2] == (6, "hpa-hold")


def test_hpa_reads_its_request_and_limit_from_the_twin_config():
    def request_per_load(**twin) -> float:
        config = Config.model_validate({"scaling": {"policy": "hpa-80"}, "twin": twin})
        return make_plan(config).policy.request_per_load

    assert request_per_load() == 2.0  # the default burstable TaskManager: 1 core requested, limit 2
    assert request_per_load(cpu_request_cores=0.5, cpu_limit_cores=1.0) == 2.0
    assert request_per_load(cpu_request_cores=1.0, cpu_limit_cores=1.0) == 1.0
    with pytest.raises(ValueError, match=r"cpu_request_cores .* must be ≤ cpu_limit_cores"):
        Config.model_validate({"twin": {"cpu_request_cores": 2.0, "cpu_limit_cores": 1.0}})
    with pytest.raises(ValueError, match="cpu_request_cores <= cpu_limit_cores"):
        TwinParams(cpu_request_cores=2.0, cpu_limit_cores=1.0)


@pytest.mark.parametrize(("limit_cores", "scales_up"), [(1.0, False), (2.0, True)])
def test_hpa_on_a_saturated_skewed_job_sees_the_overload_only_with_a_limit_above_the_request(
    limit_cores, scales_up
):
    # 7 skewed workers flat out: the hottest at 0.95, the mean load ≈ 0.84 — inside 85 % ± 10 % of a
    # request equal to the limit (blind), 168 % of a 1-core request when the limit is 2 cores
    params = TwinParams(worker_capacity_rps=1000.0, cpu_noise_sd=0.0)
    twin = Twin(np.full(1200, 20_000.0), params, parallelism=7)
    config = Config.model_validate(
        {"scaling": {"policy": "hpa-85"}, "twin": {"cpu_request_cores": 1.0, "cpu_limit_cores": limit_cores}}
    )
    _iterate(config, twin, interval_s=15)
    assert (twin.parallelism > 7) is scales_up


def test_hpa_skips_the_shared_stabilization_guard():
    config = Config.model_validate({"scaling": {"policy": "hpa-80"}})
    assert make_plan(config).stabilization_s == 0
    assert make_plan(Config()).stabilization_s == Config().scaling.stabilization_s


# ---------------------------------------------------------------------------------------- Flink operator
QUICK = OperatorSettings(metrics_window_s=120, stabilization_interval_s=60, scale_down_interval_s=600)
LAG_3_MIN = 180_000.0  # 180 s of the 1000 rps input: below the 5-minute backlog-processing threshold


def _operator_step(
    operator: FlinkOperatorPolicy, time_s: float, current: int, busy_max: float, backlog: float = 0.0
) -> tuple[int, str, tuple[str, ...]]:
    """One loop of a job rescaled at 0 s that processes its 1000 rps input, busiest worker `busy_max`."""
    busy = (busy_max, *([busy_max / 2] * (current - 1)))
    throughputs = (1000.0 / current,) * current
    return operator.propose(
        _assessment(time_s, current, 0.5, 1000.0, backlog, throughputs, busy), Knowledge(last_rescale_s=0.0)
    )


def _run_operator(current: int, busy_max: float, backlog: float = 0.0, until_s: int = 180) -> list:
    operator = FlinkOperatorPolicy(1, 18, QUICK)
    return [_operator_step(operator, t, current, busy_max, backlog) for t in range(60, until_s + 1, 60)]


def test_operator_decides_only_after_its_stabilization_and_a_full_metric_window():
    operator = FlinkOperatorPolicy(1, 18, QUICK)
    rules = [_operator_step(operator, t, 4, 1.0, LAG_3_MIN)[1] for t in (30, 60, 120, 180)]
    assert rules == [
        "operator-stabilizing",
        "operator-collecting",
        "operator-collecting",
        "operator-scale-up",
    ]


def test_operator_scales_up_to_the_target_capacity_at_seventy_percent_with_restart_and_catch_up():
    target, rule, _ = _run_operator(4, 1.0, LAG_3_MIN)[-1]
    # TPR = 1000 / 1.0; target = 180000/1800 + 1000·300/1800 + 1000/0.7 = 1695 rps → ceil(4 × 1.695)
    assert target_capacity_rps(1000, LAG_3_MIN, 0.7, True, QUICK) == pytest.approx(1695.24, abs=0.01)
    assert (target, rule) == (7, "operator-scale-up")


def test_operator_does_not_scale_while_the_true_rate_lies_inside_the_band():
    # TPR = 1000 / 0.9 = 1111 ≥ the scale-up threshold 1000 (utilization 1.0): 6 workers would be the
    # target at 0.7, but the job is inside the band, so it stays
    target, rule, _ = _run_operator(4, 0.9)[-1]
    assert (target, rule) == (4, "operator-within-band")


def test_operator_delays_a_scale_down_by_the_interval_and_caps_it_by_the_max_factor():
    steps = _run_operator(10, 0.1, until_s=780)  # TPR 10000 rps for 1000 rps: factor 0.16, capped at 0.4
    assert [rule for _, rule, _ in steps[2:-1]] == ["operator-scale-down-delayed"] * 10
    assert steps[-1][:2] == (4, "operator-scale-down")  # 600 s after the first trigger at 180 s


def test_operator_never_scales_down_while_processing_a_backlog():
    steps = _run_operator(10, 0.1, backlog=400_000.0, until_s=900)  # 400 s of input behind > 300 s
    assert all(target == 10 for target, _, _ in steps)
    assert steps[-1][1] == "operator-within-band"


# ------------------------------------------------------------------------------------------------ DS2
def test_ds2_true_rate_is_records_per_busy_second_and_skips_idle_workers():
    assert true_rates_rps((100.0, 50.0, 0.0), (0.5, 0.25, 0.0)) == [200.0, 200.0]
    target, rule, _ = Ds2Policy(min_change=0).propose(
        _assessment(average_rps=500.0, throughputs=(100.0, 50.0), busy=(0.5, 0.25)), Knowledge()
    )
    assert (target, rule) == (3, "ds2-true-rate")  # ceil(500 / 200)


def test_ds2_ignores_a_minor_change_unless_the_job_falls_behind():
    """DS2 §4.2: a change by one (noisy metrics) is ignored; the job-level baseline made every one, and
    each was a restart (sine, seed 0, ds2-r2.5: 64 rescales and 387 s over the SLO, 32 and 185 without)."""
    near = _assessment(average_rps=500.0, throughputs=(100.0, 50.0), busy=(0.5, 0.25))  # wants 3 of 4
    assert Ds2Policy().propose(near, Knowledge())[:2] == (4, "ds2-minor-change")
    far = _assessment(average_rps=1_000.0, throughputs=(100.0, 50.0), busy=(0.5, 0.25))  # wants 5 of 4
    assert Ds2Policy().propose(far, Knowledge())[:2] == (4, "ds2-minor-change")
    assert Ds2Policy(min_change=0).propose(far, Knowledge())[:2] == (5, "ds2-true-rate")
    behind = _assessment(average_rps=1_000.0, throughputs=(100.0, 50.0), busy=(0.5, 0.25), backlog=1e6)
    assert Ds2Policy().propose(behind, Knowledge())[:2] == (5, "ds2-true-rate")


QUIET = TwinParams(
    worker_capacity_rps=1000.0, speed_cov=0.0, cpu_noise_sd=0.0, num_keys=1_000_000, scale_out_downtime_sd_s=0
)


def _run_loop(policy: str, trace: np.ndarray, start: int, params: TwinParams = QUIET, **baselines) -> Twin:
    config = Config.model_validate({"scaling": {"policy": policy}, "baselines": baselines})
    twin = Twin(trace, params, parallelism=start)
    _iterate(config, twin, interval_s=60)
    return twin


def _iterate(config: Config, twin: Twin, interval_s: int) -> None:
    """The loop of `config` over the twin's whole trace, every `interval_s`."""
    store = KnowledgeStore(":memory:")
    loop = make_loop(
        config,
        TwinMetricsSource(twin),
        TwinScalingTarget(twin),
        store.load(knowledge_settings(config)),
        store,
        structlog.wrap_logger(structlog.ReturnLogger()),  # no audit output
    )
    for now_s in range(interval_s, twin.duration_s + 1, interval_s):
        twin.advance_to(now_s)
        loop.iterate(now_s)


@pytest.mark.parametrize("start", [2, 8])
def test_ds2_converges_in_one_step_from_under_and_over_provisioning(start):
    # no skew beyond hashing, equal speeds: 3500 rps needs exactly 4 workers of 1000 rps
    twin = _run_loop("ds2", np.full(1800, 3500.0), start)
    assert twin.true_capacity_rps_for(3) < 3500 < twin.true_capacity_rps_for(4)
    assert (twin.rescales, twin.parallelism) == (1, 4)


# ------------------------------------------------------------------------------------------ static, oracle
def test_static_scales_once_to_its_scaleout_and_never_again():
    trace = 3000 + 2500 * np.sin(np.linspace(0, 2 * np.pi, 3600))
    twin = _run_loop("static", trace, 12, static_scaleout=6)
    workers = twin.history.view("parallelism_at")
    first = int(np.argmax(workers == 6))  # as soon as the shared guards let it act
    assert twin.rescales == 1 and 0 < first <= 300 and set(workers[first:]) == {6}


def test_oracle_takes_the_fewest_workers_that_carry_each_second():
    twin = Twin(np.repeat([500.0, 1500.0, 2500.0], 100), QUIET, parallelism=1)
    twin.advance_to(300)
    floor = oracle_workers(twin)
    assert list(np.unique(floor[:100])) == [1] and list(np.unique(floor[100:200])) == [2]
    assert list(np.unique(floor[200:])) == [3]
    assert floor.mean() == pytest.approx(floor_avg_workers(twin))
    # any per-second load, not only the seconds run: a fresh twin's whole trace
    ahead = oracle_workers(
        Twin(np.repeat([500.0, 2500.0], 50), QUIET, parallelism=1), np.array([2500.0, 500.0])
    )
    assert list(ahead) == [3, 1]


def _cheapest_schedule_by_enumeration(needed: list[int], budget: int) -> float:
    """Every schedule of scale-outs 1..max(needed), one per second: the cheapest within the budget."""
    best = math.inf
    for schedule in itertools.product(range(1, max(needed) + 1), repeat=len(needed)):
        changes = sum(a != b for a, b in itertools.pairwise(schedule))
        if changes <= budget and all(n >= need for n, need in zip(schedule, needed, strict=True)):
            best = min(best, sum(schedule))
    return best / len(needed)


def test_the_floor_within_a_rescale_budget_is_the_cheapest_schedule_that_rescales_that_often():
    rng = np.random.default_rng(7)
    for _ in range(60):
        needed = [int(n) for n in rng.integers(1, 5, size=int(rng.integers(1, 7)))]
        for budget in range(4):
            assert fewest_workers_with_rescales(np.array(needed), budget) == pytest.approx(
                _cheapest_schedule_by_enumeration(needed, budget)
            ), (needed, budget)


def test_the_floor_within_a_budget_falls_from_the_peak_to_the_oracle_floor_as_the_budget_grows():
    needed = np.repeat([2, 5, 1, 4, 1], 600)
    floors = [fewest_workers_with_rescales(needed, budget) for budget in range(6)]
    assert floors[0] == 5  # no rescale: the peak all along
    assert all(a >= b for a, b in itertools.pairwise(floors))
    assert floors[4] == floors[5] == pytest.approx(needed.mean())  # one change per step of the need
    assert math.isnan(fewest_workers_with_rescales(np.array([], dtype=int), 3))  # no seconds, no floor


def test_the_twins_floor_within_three_rescales_an_hour_lies_between_the_oracle_and_its_peak():
    trace = 3000 + 2500 * np.sin(np.linspace(0, 8 * np.pi, 7200))  # four cycles in two hours
    twin = Twin(trace, QUIET, parallelism=6)
    twin.advance_to(7200)
    floor, needed = floor_avg_workers(twin), oracle_workers(twin)
    within = floor_avg_workers_within_budget(twin)  # 6 rescales for 8 rises and falls
    assert floor < within < needed.max()
    assert within == pytest.approx(fewest_workers_with_rescales(needed, 6))
    assert floor_avg_workers_within_budget(twin, per_h=1000.0) == pytest.approx(floor)


# ---------------------------------------------------------------------------------- what the loop sees
def test_twin_busy_ratio_is_processed_over_capacity_and_one_for_the_hottest_saturated_worker():
    params = TwinParams(worker_capacity_rps=1000.0, speed_cov=0.2, cpu_noise_sd=0.0)
    light, heavy = (
        Twin(np.full(300, 1000.0), params, parallelism=4),
        Twin(np.full(300, 9000.0), params, parallelism=4),
    )
    for twin in (light, heavy):
        twin.advance_to(300)
    capacities = light.worker_capacities_rps()
    light_obs = TwinMetricsSource(light).observe(300, 60)
    for i, worker in enumerate(light_obs.workers):
        assert worker.busy_ratio[-1] == pytest.approx(worker.throughput_rps[-1] / capacities[i], rel=1e-9)
        assert 0 < worker.busy_ratio[-1] < 1
    heavy_busy = [w.busy_ratio[-1] for w in TwinMetricsSource(heavy).observe(300, 60).workers]
    assert max(heavy_busy) == pytest.approx(1.0, abs=1e-3) and min(heavy_busy) < 0.99
