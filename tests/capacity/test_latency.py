"""The queueing model against the figures of the Elasticutor model (issue 15, point 4)."""

import itertools
import math

import numpy as np
import pytest

from capacity.latency import (
    Station,
    erlang_c,
    greedy_allocation,
    min_stable_cores,
    mmk_sojourn_s,
    network_latency_s,
    seconds_over_target_after_pause,
    split_sojourn_s,
)


@pytest.mark.parametrize(("cores", "ms"), [(10, 1.6687), (11, 1.2152), (12, 1.0887), (13, 1.0394)])
def test_single_mmk_sojourn_matches_the_figures(cores, ms):
    assert mmk_sojourn_s(9_000, 1_000, cores) * 1000 == pytest.approx(ms, abs=5e-5)


def test_single_mmk_greedy_meets_1_2_ms_at_12_cores():
    station = Station("op", 9_000, 1_000)
    allocation = greedy_allocation([station], 9_000, 1.2e-3)
    assert allocation.met and allocation.cores == (12,)
    assert [c for c, _ in allocation.path] == [(10,), (11,), (12,)]  # starts at floor(9) + 1


def _chain() -> list[Station]:
    return [Station("e1", 1_000, 200), Station("e2", 2_000, 500)]


def test_chain_latency_at_the_start_allocation():
    stations = _chain()
    assert [s.first_cores() for s in stations] == [6, 5]
    assert network_latency_s(stations, (6, 5), 1_000) * 1000 == pytest.approx(14.154, abs=5e-4)


def test_chain_greedy_path_for_10_ms():
    allocation = greedy_allocation(_chain(), 1_000, 10e-3)
    steps = [(cores, round(latency * 1000, 3)) for cores, latency in allocation.path]
    assert steps == [((6, 5), 14.154), ((7, 5), 12.027), ((7, 6), 10.380), ((8, 6), 9.848)]
    assert allocation.met and allocation.cores == (8, 6)


def test_no_13_core_allocation_meets_10_ms():
    stations = _chain()
    best = min(network_latency_s(stations, (a, 13 - a), 1_000) for a in range(1, 13) if a > 5 and 13 - a > 4)
    assert best > 10e-3


def test_chain_greedy_stops_at_7_5_for_12_5_ms():
    allocation = greedy_allocation(_chain(), 1_000, 12.5e-3)
    assert allocation.cores == (7, 5) and allocation.met


def test_greedy_within_a_core_budget_reports_the_target_missed():
    allocation = greedy_allocation(_chain(), 1_000, 10e-3, max_total_cores=12)
    assert allocation.cores == (7, 5) and not allocation.met
    assert allocation.reason == "core budget spent"


def test_greedy_is_optimal_on_the_chain():
    """Brute force over every allocation up to 16 cores: the greedy's core count is the least that meets
    the target (the optimality Elasticutor cites)."""
    stations = _chain()
    for target in (9.5e-3, 10e-3, 11e-3, 12.5e-3, 14e-3):
        greedy = greedy_allocation(stations, 1_000, target)
        least = min(
            a + b
            for a, b in itertools.product(range(6, 16), range(5, 16))
            if network_latency_s(stations, (a, b), 1_000) <= target
        )
        assert sum(greedy.cores) == least


def test_unstable_and_degenerate_queues():
    assert mmk_sojourn_s(9_000, 1_000, 9) == math.inf
    assert erlang_c(9, 9.0) == 1.0 and erlang_c(3, 0.0) == 0.0
    assert mmk_sojourn_s(0, 1_000, 1) == pytest.approx(1e-3)
    assert mmk_sojourn_s(10, 0, 4) == math.inf
    assert min_stable_cores(9_000, 1_000) == 10
    # Erlang C stays finite and in (0, 1) for large k (no factorial overflow)
    assert 0 < erlang_c(400, 390.0) < 1


def test_split_queues_are_bound_by_the_hottest_subtask():
    even = split_sojourn_s(1_500, 1_000, np.ones(2))
    assert even == pytest.approx(1 / (1_000 - 750))
    assert split_sojourn_s(1_500, 1_000, np.array([0.7, 0.3])) == math.inf  # 1,050 rps on one subtask
    # a hot key group of 40%: no parallelism brings its subtask below 40% of the input
    hot = Station(
        "agg", 3_000, 1_000, shares=lambda k: np.array([0.4] + [0.6 / (k - 1)] * (k - 1)), max_cores=16
    )
    assert hot.first_cores() == 16 and hot.sojourn_s(16) == math.inf
    allocation = greedy_allocation([hot], 3_000, 1.0)
    assert not allocation.met and allocation.reason == "no core lowers the latency"


def _fifo_seconds_over(pause_s: int, load_rps: float, capacity_rps: float, slack_s: float) -> int:
    """Second by second: nothing served during the pause, then `capacity_rps` FIFO; a second counts when
    the records served in it (or, serving none, the oldest waiting) waited more than `slack_s` on average."""
    arrived = served = 0.0
    over = 0
    for t in range(10_000):
        before = served
        arrived += load_rps
        if t >= pause_s:
            served = min(arrived, served + capacity_rps)
        if served > before:  # records (before, served], served mid-second, arrived at index / load (FIFO)
            waited = t + 0.5 - ((before + served) / 2) / load_rps
        elif arrived > served:
            waited = t + 1 - served / load_rps
        else:
            waited = 0.0
        over += waited > slack_s + 1e-9
        if t > pause_s and served >= arrived:
            return over
    return over


@pytest.mark.parametrize(("pause_s", "utilization"), [(3, 0.5), (3, 0.75), (6, 0.9), (30, 0.8)])
def test_a_pause_costs_its_excess_over_the_slack_divided_by_the_spare_capacity(pause_s, utilization):
    load = 1_000.0
    closed = seconds_over_target_after_pause(float(pause_s), 1.5, utilization)
    counted = _fifo_seconds_over(pause_s, load, load / utilization, 1.5)
    assert closed == pytest.approx(counted, rel=0.05, abs=2.0)  # whole seconds against a fluid


def test_a_pause_within_the_slack_costs_nothing_and_an_overloaded_job_never_catches_up():
    assert seconds_over_target_after_pause(1.0, 1.5, 0.9) == 0.0
    assert seconds_over_target_after_pause(3.0, 1.5, 1.0) == math.inf
