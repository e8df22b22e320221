"""Predicted recovery: downtime once, then the catch-up on the spare capacity, in whole seconds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from recovery.predict import predict_lag_catch_ups_s, predict_recoveries_s, predict_recovery_s, replay_records


def constant(rate_rps: float, seconds: int) -> np.ndarray:
    return np.full(seconds, float(rate_rps))


# ---- replay_records ----


def test_replay_sums_the_last_checkpoint_interval_of_the_history():
    rates = np.arange(1.0, 21.0)  # 1, 2, ..., 20 records/s, most recent last
    assert replay_records(rates, 10) == sum(range(11, 21))  # 155


def test_replay_takes_a_fraction_of_the_oldest_second_for_a_fractional_interval():
    assert replay_records(np.array([100.0, 4.0, 6.0, 8.0]), 2.5) == 0.5 * 4 + 6 + 8


def test_replay_extrapolates_a_short_history_with_its_mean():
    assert replay_records(np.array([100.0, 200.0]), 10) == 150 * 10


def test_replay_fills_gaps_with_the_mean_of_the_known_seconds():
    assert replay_records(np.array([100.0, np.nan, 300.0]), 3) == 200 * 3


def test_replay_counts_negative_rates_as_none():
    assert replay_records(np.array([-50.0, 10.0]), 2) == 10


def test_replay_is_zero_without_a_checkpoint_interval_and_unknown_without_history():
    assert replay_records(np.array([100.0]), 0) == 0
    assert math.isnan(replay_records(np.array([]), 10))
    assert math.isnan(replay_records(np.array([np.nan, np.nan]), 10))
    assert math.isnan(replay_records(np.array([1.0]), math.nan))


# ---- predict_recovery_s: hand-computed cases ----


def test_constant_load_matches_the_closed_form():
    # backlog at restart = 4000 replay + 2000 lag + 600 rps x 30 s down = 24000 records;
    # spare 1000 - 600 = 400 rps works it off in 60 s; recovered 30 + 60 = 90 s from now.
    assert predict_recovery_s(1000, constant(600, 900), 2000, 4000, 30) == 90


def test_catch_up_is_rounded_up_to_whole_seconds():
    # 1000 lag + 600 x 10 = 7000 records / 400 rps = 17.5 s -> 18 s; 10 + 18 = 28
    assert predict_recovery_s(1000, constant(600, 900), 1000, 0, 10) == 28


def test_a_fractional_downtime_is_charged_as_whole_seconds():
    # 9.2 s down: second 10 is partly down, so it processes nothing and receives its 600 records
    assert predict_recovery_s(1000, constant(600, 900), 1000, 0, 9.2) == 28
    assert predict_recovery_s(1000, constant(600, 900), 1000, 0, 9.0) == 9 + math.ceil(6400 / 400)


def test_arrivals_during_the_catch_up_are_counted_through_the_forecast():
    forecast = np.array([100, 100, 500, 0, -100, 0] + [0] * 10, dtype=float)
    # 2 s down: backlog 1300 + 100 + 100 = 1500. Spare from second 3 on: 500, 1000, 1000 (a negative
    # forecast counts as 0 arrivals, not as extra capacity), 1000 -> cumulative 500, 1500, 2500, 3500.
    assert predict_recovery_s(1000, forecast, 1300, 0, 2) == 4  # exactly covered at second 4
    assert predict_recovery_s(1000, forecast, 1301, 0, 2) == 5
    # 2550 to catch up: second 5 brings 2500 (2600 if the -100 counted), so second 6
    assert predict_recovery_s(1000, forecast, 2350, 0, 2) == 6


def test_downtime_is_counted_once():
    # 10 s down at 500 rps, nothing else: 5000 records / 500 spare = 10 s after the restart -> 20 s.
    # Counting the downtime again (in the arrivals and as extra seconds) would give 30 s or more.
    assert predict_recovery_s(1000, constant(500, 100), 0, 0, 10) == 20


@pytest.mark.parametrize("capacity_rps", [600.0, 599.0, 0.0, -5.0, math.nan])
def test_no_recovery_when_capacity_does_not_exceed_the_forecast_or_is_unknown(capacity_rps):
    assert predict_recovery_s(capacity_rps, constant(600, 900), 1000, 100, 10) == math.inf


def test_no_recovery_when_the_forecast_ends_before_the_catch_up():
    # the constant case needs 90 forecast seconds
    assert predict_recovery_s(1000, constant(600, 89), 2000, 4000, 30) == math.inf
    assert predict_recovery_s(1000, constant(600, 90), 2000, 4000, 30) == 90


def test_no_recovery_when_the_downtime_outlasts_the_forecast():
    assert predict_recovery_s(1000, constant(10, 20), 0, 0, 21) == math.inf
    assert predict_recovery_s(1000, constant(10, 20), 0, 0, math.inf) == math.inf


def test_unknown_inputs_give_no_recovery():
    assert predict_recovery_s(1000, constant(600, 900), math.nan, 0, 10) == math.inf
    assert predict_recovery_s(1000, constant(600, 900), 0, math.nan, 10) == math.inf
    assert predict_recovery_s(1000, constant(600, 900), 0, 0, math.nan) == math.inf
    with_gap = constant(600, 900)
    with_gap[5] = np.nan  # during the downtime
    assert predict_recovery_s(1000, with_gap, 0, 0, 10) == math.inf


def test_nothing_to_catch_up_recovers_at_the_restart():
    assert predict_recovery_s(1000, constant(600, 900), 0, 0, 0) == 0
    assert predict_recovery_s(1000, constant(0, 900), 0, 0, 7) == 7


def test_zero_downtime_catches_up_the_backlog_alone():
    assert predict_recovery_s(1000, constant(600, 900), 800, 0, 0) == 2  # 800 / 400
    assert predict_recovery_s(1000, constant(600, 900), 801, 0, 0) == 3


def test_zero_backlog_still_catches_up_the_downtime_arrivals():
    assert predict_recovery_s(1000, constant(600, 900), 0, 0, 5) == 5 + math.ceil(3000 / 400)  # 13


# ---- properties ----


def queue_reference_s(capacity: float, forecast: list[float], backlog: float, down_s: int) -> float:
    """Second-by-second queue: during the stop everything piles up, then the job serves `capacity`."""
    queue = backlog
    for second, arriving in enumerate(forecast, start=1):
        queue += arriving
        if second > down_s:
            queue -= capacity
        if second >= down_s and queue <= 0:
            return second
    return math.inf


rates = st.lists(st.integers(0, 2_000).map(float), min_size=1, max_size=200)
capacities = st.integers(1, 3_000).map(float)
records = st.integers(0, 100_000).map(float)
downtimes = st.integers(0, 60)


@settings(max_examples=300, deadline=None)
@given(capacities, rates, records, records, downtimes)
def test_equals_a_second_by_second_queue(capacity, forecast, backlog, replay, downtime):
    assume(downtime >= 1 or backlog + replay > 0)  # the queue only checks from second 1
    expected = queue_reference_s(capacity, forecast, backlog + replay, downtime)
    assert predict_recovery_s(capacity, np.array(forecast), backlog, replay, downtime) == expected


@settings(max_examples=300, deadline=None)
@given(capacities, capacities, rates, records, records, st.floats(0, 60))
def test_more_capacity_never_recovers_later(c1, c2, forecast, backlog, replay, downtime):
    low, high = sorted((c1, c2))
    f = np.array(forecast)
    assert predict_recovery_s(high, f, backlog, replay, downtime) <= predict_recovery_s(
        low, f, backlog, replay, downtime
    )


@settings(max_examples=300, deadline=None)
@given(capacities, rates, records, records, records, st.floats(0, 60))
def test_a_larger_backlog_never_recovers_sooner(capacity, forecast, b1, b2, replay, downtime):
    small, large = sorted((b1, b2))
    f = np.array(forecast)
    assert predict_recovery_s(capacity, f, large, replay, downtime) >= predict_recovery_s(
        capacity, f, small, replay, downtime
    )
    assert predict_recovery_s(capacity, f, replay, large, downtime) >= predict_recovery_s(
        capacity, f, replay, small, downtime
    )


@settings(max_examples=300, deadline=None)
@given(capacities, rates, records, records, st.floats(0, 60), st.floats(0, 60))
def test_a_longer_downtime_never_recovers_sooner(capacity, forecast, backlog, replay, d1, d2):
    short, long = sorted((d1, d2))
    f = np.array(forecast)
    slow = predict_recovery_s(capacity, f, backlog, replay, long)
    assert slow >= predict_recovery_s(capacity, f, backlog, replay, short)
    assert slow >= long  # recovery includes the downtime


def test_lag_catch_up_matches_the_closed_form():
    # 1,000 rps; a 33 s stop after a 5 s old checkpoint leaves a 38 s lag, 8 s over a 30 s SLO: 8,000
    # records beyond what the SLO allows, worked off at capacity − 1,000 per second
    capacities = np.array([1_100.0, 1_250.0, 2_000.0, 5_000.0])
    got = predict_lag_catch_ups_s(capacities, constant(1_000.0, 900), 0.0, 5_000.0, 33.0, 30.0)
    assert got.tolist() == [80.0, 32.0, 8.0, 2.0]


def test_lag_catch_up_is_zero_when_the_restart_stays_within_the_slo():
    got = predict_lag_catch_ups_s(np.array([1_100.0]), constant(1_000.0, 900), 0.0, 5_000.0, 15.0, 30.0)
    assert got.tolist() == [0.0]


def test_lag_catch_up_counts_the_backlog_the_job_already_has():
    # 20 s of lag before the restart: a 15 s stop now ends 10 s over the SLO
    got = predict_lag_catch_ups_s(np.array([2_000.0]), constant(1_000.0, 900), 20_000.0, 5_000.0, 15.0, 30.0)
    assert got.tolist() == [10.0]


def test_lag_catch_up_is_unknown_without_a_forecast_downtime_or_capacity_to_catch_up():
    forecast = constant(1_000.0, 900)
    assert np.isinf(
        predict_lag_catch_ups_s(np.array([900.0, math.nan]), forecast, 0.0, 5_000.0, 33.0, 30.0)
    ).all()
    assert np.isinf(
        predict_lag_catch_ups_s(np.array([2_000.0]), forecast, 0.0, 5_000.0, math.inf, 30.0)
    ).all()
    nan_forecast = np.r_[np.full(30, 1_000.0), np.full(870, math.nan)]
    assert np.isinf(
        predict_lag_catch_ups_s(np.array([2_000.0]), nan_forecast, 0.0, 5_000.0, 33.0, 30.0)
    ).all()


@settings(max_examples=60, deadline=None)
@given(
    st.floats(1_000.0, 50_000.0),
    st.floats(1.0, 5.0),
    st.floats(0.0, 200_000.0),
    st.floats(0.0, 60.0),
    st.floats(1.0, 120.0),
)
def test_lag_catch_up_never_exceeds_the_full_recovery(rate, headroom, backlog, downtime, slo):
    # the lag is within the SLO no later than when nothing waits at all
    capacity, forecast = np.array([rate * headroom]), constant(rate, 900)
    lag = predict_lag_catch_ups_s(capacity, forecast, backlog, rate * 5, downtime, slo)[0]
    full = predict_recoveries_s(capacity, forecast, backlog, rate * 5, downtime)[0] - math.ceil(downtime)
    assert 0.0 <= lag <= full
