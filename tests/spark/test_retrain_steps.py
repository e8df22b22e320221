"""The steps of one job's retraining (forecasting/spark/train.py, seasonal_profile.py, models.py), without Spark."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
from statsmodels.tsa.holtwinters import ExponentialSmoothing

from forecasting.arima import predict
from forecasting.spark.models import HoltWinters, ProfiledArima, SeasonalNaive, fit_holt_winters
from forecasting.spark.seasonal_profile import DAY_S, WEEK_S, candidate_periods, fit_profile
from forecasting.spark.train import RetrainSettings, clean, regularise, train_job
from forecasting.synthetic import MONDAY_2026_01_05_S, WorkloadShape, generate

T0 = MONDAY_2026_01_05_S


def test_duplicated_timestamps_keep_the_last_value_and_bad_samples_are_dropped():
    times, rates = clean(np.array([60.0, 0.0, 60.0, 120.0, 180.0]), np.array([1.0, 2.0, 3.0, np.nan, -4.0]))
    assert times.tolist() == [0.0, 60.0] and rates.tolist() == [2.0, 3.0]


def test_rates_and_times_no_load_can_have_are_dropped_as_the_daemon_drops_them():
    """A rate of 1e12 won the model selection; one row stamped 1970 in a week's history made a 1.3 GB grid."""
    times = T0 + np.arange(5) * 60.0
    kept_times, kept = clean(np.append(times, 0.0), np.array([1.0, 2.0, 1e12, 3.0, 4.0, 5.0]))
    assert kept_times.tolist() == [T0, T0 + 60.0, T0 + 180.0, T0 + 240.0] and kept.tolist() == [
        1.0,
        2.0,
        3.0,
        4.0,
    ]


def test_holt_winters_follows_its_trend_across_an_hour_at_most():
    """A model trained ten days before the data it is joined to extrapolated ten days of a falling trend."""
    model = HoltWinters(0.5, 0.1, 0.0, 300.0, 600.0, level=700.0, trend=-2.0, season=np.zeros(2), last_step=0)
    ten_days = 10 * DAY_S
    assert model.predict(1, np.array([[ten_days]]))[0] == pytest.approx(700.0 - 2.0 * 12)
    assert model.predict(1, np.array([[450.0]]))[0] == pytest.approx(700.0 - 2.0 * 1)  # near: the trend
    model.update(np.array([650.0, 650.0]), np.array([[ten_days], [ten_days + 300.0]]))
    assert model.level == pytest.approx(0.5 * 650.0 + 0.5 * (700.0 - 2.0 * 13))


def test_short_gaps_are_interpolated_long_ones_held_outages_treated_as_gaps():
    times = np.arange(0, 100) * 60.0
    rates = np.full(100, 10.0)
    rates[20:30] = 0.0  # ten minutes of zeros: the job was down
    rates[50:52] = [20.0, 20.0]
    keep = np.ones(100, dtype=bool)
    keep[40:42] = False  # 2 minutes missing: interpolated
    keep[60:80] = False  # 20 minutes missing: held
    series = regularise(times[keep], rates[keep], 60.0, max_gap_s=120.0, outage_min_s=600.0)
    assert len(series) == 100 and (series.gaps, series.outages) == (2, 1)
    assert not series.observed[20:30].any() and not series.observed[40:42].any()
    assert not series.observed[60:80].any() and series.observed[:20].all()
    np.testing.assert_array_equal(series.values[20:30], 10.0)  # held over the outage, not zeros
    np.testing.assert_array_equal(series.values[60:80], 10.0)  # the last value before the gap
    np.testing.assert_allclose(series.times_s[:2], [30.0, 90.0])  # bucket centres


def test_zeros_of_a_job_that_is_always_idle_are_data_not_an_outage():
    series = regularise(np.arange(0, 60) * 60.0, np.zeros(60), 60.0, 120.0, 600.0)
    assert series.outages == 0 and series.observed.all()


def _coarse(shape: WorkloadShape, weeks: float, seed: int = 1):
    frame = generate(shape, seed=seed, duration_s=weeks * WEEK_S, step_s=300.0)
    return regularise(frame.timestamp.to_numpy(), frame.rate.to_numpy(), 300.0, 600.0, 600.0)


def test_long_histories_show_the_day_and_the_week_short_ones_only_the_day():
    three_weeks = _coarse(WorkloadShape(), 3)
    assert set(candidate_periods(three_weeks.values, three_weeks.observed, 300.0)) == {DAY_S, WEEK_S}
    five_days = _coarse(WorkloadShape(), 5 / 7)
    assert set(candidate_periods(five_days.values, five_days.observed, 300.0)) == {DAY_S}
    noise = np.random.default_rng(0).normal(100, 5, 3000)
    assert candidate_periods(noise, np.ones(3000, dtype=bool), 300.0) == {}


def test_the_profile_recovers_a_known_season_and_ignores_level_and_trend():
    times = T0 + np.arange(0, 14 * 288) * 300.0
    season = 50 * np.sin(2 * np.pi * times / DAY_S) + 20 * np.cos(4 * np.pi * times / DAY_S)
    noise = np.random.default_rng(1).normal(0, 2, times.size)
    values = 1000 + 0.001 * (times - T0) + season + noise
    profile = fit_profile(times, values, np.ones(times.size, dtype=bool), (DAY_S,))
    assert profile.periods_s == (DAY_S,) and profile.harmonics[0] >= 2
    np.testing.assert_allclose(profile(times), season, atol=1.5)
    assert fit_profile(times, values, np.ones(times.size, dtype=bool), ()) is None


def test_holt_winters_recursions_are_the_ones_statsmodels_fits():
    times = T0 + (np.arange(3 * 288) + 0.5) * 300.0
    rng = np.random.default_rng(2)
    values = 500 + 100 * np.sin(2 * np.pi * times / DAY_S) + np.cumsum(rng.normal(0, 3, times.size))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = fit_holt_winters(times, values, 300.0, DAY_S)
        reference = ExponentialSmoothing(
            values, trend="add", seasonal="add", seasonal_periods=288, initialization_method="heuristic"
        ).fit()
    assert model.gamma == pytest.approx(reference.params["smoothing_seasonal"])
    assert model.level == pytest.approx(reference.level[-1]) and model.trend == pytest.approx(
        reference.trend[-1]
    )
    ahead = times[-1] + 300.0 * np.arange(1, 13)
    np.testing.assert_allclose(model.predict(12, ahead[:, None]), reference.forecast(12), rtol=1e-9)


def test_holt_winters_online_averages_buckets_into_its_steps():
    def fresh() -> HoltWinters:
        return HoltWinters(
            0.5, 0.1, 0.2, 300.0, 600.0, level=10.0, trend=0.0, season=np.zeros(2), last_step=-1
        )

    by_bucket, by_step = fresh(), fresh()
    bucket_times = np.arange(0, 1200, 60.0) + 30.0
    values = np.arange(20, dtype=float)
    by_bucket.update(values, bucket_times[:, None])
    step_means = values.reshape(4, 5).mean(axis=1)
    by_step.update(step_means[:3], (np.arange(3) * 300.0 + 150.0)[:, None])
    by_step.update(step_means[3:], np.array([[1050.0]]))
    assert by_bucket.last_step == by_step.last_step == 2  # the fourth step is still open in both
    assert by_bucket.level == pytest.approx(by_step.level)
    np.testing.assert_allclose(by_bucket.season, by_step.season)


def test_seasonal_naive_predicts_one_season_ago_and_learns_new_values():
    times = np.arange(0, 2 * 3600, 60.0) + 30.0
    model = SeasonalNaive.from_history(times, np.sin(times / 3600 * 2 * np.pi), period_s=3600.0)
    ahead = times[-1] + 60.0 * np.arange(1, 11)
    np.testing.assert_allclose(model.predict(10, ahead[:, None]), np.sin((ahead - 3600) / 3600 * 2 * np.pi))
    model.update(np.array([42.0]), ahead[:1, None])
    assert model.predict(1, (ahead[:1] + 3600.0)[:, None])[0] == 42.0


def test_the_profiled_arima_stays_within_its_bound_and_adds_the_profile_back():
    rng = np.random.default_rng(3)
    residual = np.cumsum(rng.normal(0, 1, 80))
    import pmdarima as pm

    model = ProfiledArima(
        pm.ARIMA(order=(1, 1, 0), suppress_warnings=True).fit(residual[:50]), max_buckets=60
    )
    model.update(residual[50:80] + 100.0, np.full((30, 1), 100.0))
    assert model.held.size == 60
    np.testing.assert_allclose(model.held, residual[20:80])
    plain = model.arima.predict(n_periods=3)
    np.testing.assert_allclose(
        model.predict(3, np.array([[5.0], [6.0], [7.0]])), plain + np.array([5.0, 6.0, 7.0])
    )


def test_too_short_or_too_coarse_histories_are_skipped_with_the_reason(small_settings):
    times = T0 + np.arange(0, 3600, 300.0)
    short = train_job("short", times, np.ones(times.size), small_settings)
    assert short.status == "skipped" and "history covers" in short.reason
    coarse_times = T0 + np.arange(0, 3 * 86_400, 3600.0)
    coarse = train_job("coarse", coarse_times, np.ones(coarse_times.size), small_settings)
    assert coarse.status == "skipped" and "coarser than the forecast horizon" in coarse.reason
    assert train_job("empty", np.array([]), np.array([]), small_settings).status == "skipped"


def test_every_candidate_is_backtested_and_the_best_is_kept(trained, small_settings):
    result, frame = trained  # 4 days of 5-minute synthetic history (conftest)
    assert result.status == "ok", result.reason
    backtest = result.metadata["backtest"]
    scores = backtest["wape"]
    assert set(scores) == {"arima", "holt-winters", "seasonal-naive"}
    assert backtest["best"] == min(scores, key=scores.get) == result.model.family
    assert backtest["origins"] == small_settings.backtest_origins
    assert result.metadata["seasonality"]["profile"]["periods_s"] == [DAY_S]
    assert result.metadata["training_range"]["buckets"] == 4 * 288
    end_s = frame.timestamp.iloc[0] + 4 * DAY_S
    future = end_s + 150.0 + 300.0 * np.arange(3)
    assert np.all(np.isfinite(predict(result.model, future)))


def test_a_history_that_repeats_exactly_keeps_the_seasonal_naive(small_settings):
    times = T0 + np.arange(0, 3 * 288) * 300.0
    hour = np.mod(times, DAY_S) // 3600
    rates = np.where((hour >= 9) & (hour < 17), 800.0, 100.0) + 37.0 * (np.mod(hour, 3) == 0)  # steps
    result = train_job("steps", times, rates, small_settings)
    assert result.status == "ok" and result.model.family == "seasonal-naive"
    assert result.metadata["backtest"]["wape"]["seasonal-naive"] == 0.0
    next_day = times[-288:] + DAY_S
    np.testing.assert_allclose(predict(result.model, next_day + 150.0), rates[-288:])


def test_min_history_counts_observed_buckets_not_the_gap_between_them():
    """20 samples, half at 00:00 and half 8 h later, span 8 h but hold 200 s of data."""
    times = np.concatenate([T0 + np.arange(10) * 10.0, T0 + 8 * 3600 + np.arange(10) * 10.0])
    result = train_job("sparse", times, np.r_[np.full(10, 100.0), np.full(10, 5000.0)], RetrainSettings())
    assert result.status == "skipped" and "covers 200 s of observed data" in result.reason


def test_a_backtest_span_without_a_horizon_of_observed_buckets_is_skipped(small_settings):
    """Two days and one row a day later: the held-out last quarter is that row and a gap."""
    times = T0 + np.arange(2 * 288) * 300.0
    rates = 1000.0 + 100.0 * np.sin(2 * np.pi * times / DAY_S)
    result = train_job("stray", np.append(times, times[-1] + DAY_S), np.append(rates, 1000.0), small_settings)
    assert result.status == "skipped" and "backtest span holds 1 observed buckets" in result.reason


def test_one_damaged_row_neither_wins_nor_spoils_the_model(small_settings):
    """One row at 5e8 rps (below MAX_RATE_RPS) in the held-out span of two days at ~1,000 rps: the
    model published was a flat 3.5e5 with a backtest WAPE of 0.998."""
    times = T0 + np.arange(2 * 288) * 300.0
    rates = 1000.0 + 100.0 * np.sin(2 * np.pi * times / DAY_S)
    rates[-20] = 5e8
    result = train_job("spike", times, rates, small_settings)
    assert result.status == "ok", result.reason
    assert result.metadata["training_range"]["rows_dropped"] == 1
    assert result.metadata["backtest"]["wape"][result.metadata["backtest"]["best"]] < 0.1
    assert np.all(predict(result.model, times[-1] + 300.0 * np.arange(1, 4)) < 2000.0)


def test_a_best_backtest_worse_than_the_threshold_publishes_nothing(trained, small_settings):
    _, frame = trained
    history = frame[frame.timestamp < frame.timestamp.iloc[0] + 4 * DAY_S]
    strict = replace(small_settings, max_backtest_wape=1e-6)
    result = train_job("shop", history.timestamp.to_numpy(), history.rate.to_numpy(), strict)
    assert result.status == "skipped" and result.model is None
    assert "best backtest WAPE" in result.reason and "nothing published" in result.reason


def test_tiny_histories_and_millisecond_timestamps_are_skipped_with_the_reason():
    tiny = T0 + np.arange(20) * 10.0
    result = train_job("tiny", tiny, np.full(20, 1000.0), RetrainSettings(min_history_s=1.0))
    assert result.status == "skipped" and "at least 3600 s" in result.reason
    times_ms = (T0 + np.arange(2880) * 10.0) * 1000
    result = train_job("ms", times_ms, np.full(2880, 1000.0), RetrainSettings())
    assert result.status == "skipped" and "epoch milliseconds" in result.reason
