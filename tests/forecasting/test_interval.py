"""The forecast's empirical upper bound and bias correction (forecasting/interval.py), and the forecaster
serving them."""

from __future__ import annotations

import numpy as np

from forecasting.executor import InlineExecutor
from forecasting.interval import BAND_S, PeakErrors
from forecasting.online import WorkloadForecaster
from forecasting.types import ForecastSettings

HORIZON_S = 300


def _learned(truth_over_forecast: float, forecasts: int = 30) -> PeakErrors:
    """Forecasts of a flat 1,000 rps while the load really ran at `truth_over_forecast` times that."""
    errors = PeakErrors(HORIZON_S, min_samples=10)
    for i in range(forecasts + HORIZON_S // 60):  # as the forecaster does: judge what arrived, then keep
        times = np.arange(5.0, i * 60.0, 10.0)
        errors.learn(times, np.full(len(times), 1_000.0 * truth_over_forecast))
        if i < forecasts:
            errors.record(i * 60.0, np.full(HORIZON_S, 1_000.0))
    return errors


def test_an_under_forecast_raises_the_upper_bound_and_the_central_forecast_by_it():
    errors = _learned(1.3)
    forecast = np.full(HORIZON_S, 2_000.0)
    assert np.allclose(errors.upper(forecast), 2_600.0)
    assert np.allclose(errors.central(forecast), 2_600.0)


def test_an_over_forecast_lowers_the_central_forecast_but_never_the_upper_bound():
    errors = _learned(0.8)
    forecast = np.full(HORIZON_S, 2_000.0)
    assert np.allclose(errors.upper(forecast), 2_000.0)
    assert np.allclose(errors.central(forecast), 1_600.0)


def test_a_change_of_level_is_not_a_bias_the_central_correction_stays_within_twofold():
    forecast = np.full(HORIZON_S, 2_000.0)
    ramp = _learned(3.5)  # forecasts made at a few hundred rps judged against a load that grew since
    assert np.allclose(ramp.upper(forecast), 7_000.0)  # the upper bound still says how far it went
    assert np.allclose(ramp.central(forecast), 2 * 2_000.0)
    assert np.allclose(_learned(0.3).central(forecast), 2_000.0 / 2)


def test_without_enough_judged_forecasts_nothing_is_corrected():
    errors = _learned(1.5, forecasts=5)  # 5 < min_samples per band
    forecast = np.full(HORIZON_S, 2_000.0)
    assert np.array_equal(errors.upper(forecast), forecast)
    assert np.array_equal(errors.central(forecast), forecast)


def test_only_bands_the_load_has_fully_covered_are_judged():
    errors = PeakErrors(HORIZON_S, min_samples=1)
    errors.record(0.0, np.full(HORIZON_S, 1_000.0))
    errors.learn(np.arange(5.0, BAND_S + 30.0, 10.0), np.full(9, 2_000.0))  # 90 s: the first band only
    factors = errors.factors(0.5)
    assert factors[0] == 2.0 and np.all(factors[1:] == 1.0)


def test_unobserved_buckets_do_not_count_and_the_state_survives_a_restart():
    errors = _learned(1.2)
    restored = PeakErrors(HORIZON_S, min_samples=10)
    restored.load_state(errors.state_dict())
    assert np.array_equal(restored.factors(0.9), errors.factors(0.9))
    nan_only = PeakErrors(HORIZON_S, min_samples=1)
    nan_only.record(0.0, np.full(HORIZON_S, 1_000.0))
    nan_only.learn(np.arange(5.0, 400.0, 10.0), np.full(40, np.nan))
    assert np.all(nan_only.factors(0.5) == 1.0)


def test_the_forecaster_serves_an_upper_bound_that_covers_a_load_it_under_forecasts():
    """A staircase that steps up 20% every 5 minutes: the linear fallback lags each step; after an hour of
    judged forecasts the upper bound of the next minute covers the load that then arrives."""
    settings = ForecastSettings(horizon_s=HORIZON_S, min_history_s=7_200, max_history_s=7_200)
    forecaster = WorkloadForecaster(settings, executor=InlineExecutor())
    seconds = np.arange(4_000)
    rates = 1_000.0 * 1.2 ** ((seconds % 1_200) // 300)
    covered, covered_by_mean = [], []
    for now in range(60, 3_600, 60):
        forecaster.observe(seconds[now - 60 : now].astype(float) + 1, rates[now - 60 : now])
        forecast = forecaster.forecast(float(now))
        if now > 2_400:
            arriving = rates[now + 1 : now + 1 + BAND_S].max()
            covered.append(forecast.upper_rps[:BAND_S].max() >= arriving)
            covered_by_mean.append(forecast.rates_rps[:BAND_S].max() >= arriving)
            assert np.all(forecast.upper_rps >= forecast.rates_rps)
    assert np.mean(covered) >= 0.75 and np.mean(covered) >= np.mean(covered_by_mean) + 0.2
    restored = WorkloadForecaster.from_state(forecaster.state_dict(), settings, executor=InlineExecutor())
    assert np.array_equal(restored._peak_errors.factors(0.9), forecaster._peak_errors.factors(0.9))


def test_before_any_model_the_upper_bound_keeps_the_peak_of_the_fallback_window():
    """A load that fell from 1,800 to 250 rps in ten minutes: the linear trend runs to zero, and an upper
    bound that only multiplies the forecast would follow it down. With no model yet it keeps the highest
    rate of the fallback's window, so a plan cannot size for less than the job just carried."""
    settings = ForecastSettings(horizon_s=HORIZON_S, min_history_s=1_800, linear_window_s=600)
    forecaster = WorkloadForecaster(settings, executor=InlineExecutor())
    seconds = np.arange(1, 661, dtype=float)
    rates = np.interp(seconds, [0, 540, 660], [1_800, 250, 250])
    forecaster.observe(seconds, rates)
    forecast = forecaster.forecast(660.0)
    assert forecast.reason.startswith("no model yet")
    assert forecast.rates_rps.max() < 250  # the trend extrapolates the fall
    window_peak = rates[seconds > 60].max()
    assert forecast.upper_rps.min() >= window_peak * 0.99


def test_at_a_loop_faster_than_a_band_every_lead_band_learns():
    """A 30-s loop records two forecasts per band: keeping a band's count of them judged only the first
    half of the horizon, and the later lead minutes kept no upper bound at all."""
    errors = PeakErrors(HORIZON_S, min_samples=10, record_interval_s=30.0)
    for i in range(80 + 2 * HORIZON_S // 60):
        times = np.arange(5.0, i * 30.0, 10.0)
        errors.learn(times, np.full(len(times), 1_300.0))
        if i < 80:
            errors.record(i * 30.0, np.full(HORIZON_S, 1_000.0))
    assert np.allclose(errors.factors(0.9), 1.3)
