"""The forecaster's iteration: what the model is fed, when it is fitted, when the fallback serves."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from forecasting.executor import InlineExecutor
from forecasting.grid import BucketGrid
from forecasting.online import SEASON_CHECK_ITERATIONS, WorkloadForecaster
from forecasting.types import ForecastSettings
from tests.forecasting.fakes import ConstantModel, Driver, ManualExecutor, PersistenceModel, RecordingFit

SETTINGS = ForecastSettings(
    resolution_s=10.0, horizon_s=300.0, min_history_s=300.0, max_history_s=1200.0, linear_window_s=120.0
)


def flat(level: float):
    return lambda t: np.full(t.shape, level)


def test_forecast_contract_per_second_non_negative_read_only():
    driver = Driver(
        WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=RecordingFit()), lambda t: 300 - t
    )
    forecast = driver.step(120)  # a falling line: the linear fallback would go below zero
    assert forecast.start_s == 120.0
    assert forecast.rates_rps.shape == (300,)
    np.testing.assert_array_equal(forecast.times_s, np.arange(121.0, 421.0))
    assert forecast.rates_rps.min() == 0.0
    with pytest.raises(ValueError):
        forecast.rates_rps[0] = 1.0


def test_before_min_history_the_linear_trend_serves_and_no_fit_runs():
    fit = RecordingFit()
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=fit), lambda t: 1000 + 2 * t)
    forecasts = [driver.step() for _ in range(4)]  # 240 s of data
    assert fit.calls == []
    assert [f.model for f in forecasts] == ["linear"] * 4
    assert forecasts[-1].reason == "no model yet: history 240 s < 300 s"  # buckets before 240 s are final
    np.testing.assert_allclose(forecasts[-1].rates_rps, 1000 + 2 * forecasts[-1].times_s - 1, rtol=1e-9)


def test_the_first_fit_runs_once_history_reaches_min_history():
    fit = RecordingFit()
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=fit), flat(700.0))
    reasons = [driver.step().reason for _ in range(8)]
    assert len(fit.calls) == 1
    fitted_at = reasons.index("new model swapped in")
    assert reasons[fitted_at - 1] == "no model yet: history 240 s < 300 s"
    assert fit.calls[0] * SETTINGS.resolution_s >= SETTINGS.min_history_s


def test_each_final_bucket_reaches_the_model_exactly_once_in_order():
    fit = RecordingFit()
    forecaster = WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=fit)
    reference = BucketGrid(10.0, max_gap_buckets=12, retention_buckets=10_000, reset_gap_buckets=10_000)
    rng = np.random.default_rng(7)
    stamps = np.arange(0.0, 1800.0, 5.0)  # a 5-s scrape
    rates = 1000 + rng.normal(0, 50, stamps.size)
    rates[rng.choice(stamps.size, 20, replace=False)] = np.nan
    keep = ~((stamps >= 600) & (stamps < 700))  # a 100-s hole
    stamps, rates = stamps[keep], rates[keep]
    reference.add(stamps, rates)
    for now in range(60, 1801, 60):  # 120-s windows every 60 s: everything is sent twice
        window = (stamps > now - 120) & (stamps <= now)
        forecaster.observe(stamps[window], rates[window])
        forecaster.forecast(float(now))
    model = fit.models[0]
    assert len(fit.models) == 1
    assert model.received == reference.values[: len(model.received)].tolist()
    assert len(model.received) == reference.values.size
    assert sum(model.update_sizes) + fit.calls[0] == len(model.received)


def test_a_poor_previous_forecast_switches_to_the_linear_fallback_for_one_iteration():
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=RecordingFit()), flat(1000.0))
    driver.step_until(lambda f: f.model == "persistencemodel")
    shift_s = driver.now_s + 60
    driver.level = lambda t: np.where(t >= shift_s, 2000.0, 1000.0)  # doubles from the next bucket on
    driver.step()
    shifted = driver.step()  # judged: forecast 1000, observed 2000 -> WAPE 0.5
    assert shifted.last_wape == pytest.approx(0.5)
    assert (shifted.model, shifted.reason, shifted.poor_streak) == ("linear", "previous WAPE 0.500 > 0.25", 1)
    recovered = driver.step()  # the model predicted 2000 in the shifted iteration, and 2000 came
    assert recovered.last_wape == 0.0
    assert (recovered.model, recovered.poor_streak) == ("persistencemodel", 0)


@pytest.mark.parametrize(("new_level", "model"), [(800.0, "persistencemodel"), (790.0, "linear")])
def test_the_threshold_itself_still_trusts_the_model(new_level, model):
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=RecordingFit()), flat(1000.0))
    driver.step_until(lambda f: f.model == "persistencemodel")
    shift_s = driver.now_s + 60
    driver.level = lambda t: np.where(t >= shift_s, new_level, 1000.0)
    driver.step()
    judged = driver.step()
    assert judged.last_wape == pytest.approx(abs(1000 - new_level) / new_level)  # 0.25 for 800
    assert judged.model == model


def test_fifteen_poor_iterations_submit_exactly_one_retrain():
    executor = ManualExecutor()
    fit = RecordingFit(make=lambda y, call: ConstantModel(y, level=0.0))  # always 100% off
    forecaster = WorkloadForecaster(replace(SETTINGS, fit_timeout_s=3600.0), executor=executor, fit=fit)
    driver = Driver(forecaster, flat(1000.0))
    driver.step_until(lambda f: executor.submitted == 1)
    executor.run_all()
    assert driver.step().reason == "new model swapped in"
    streaks = []
    for _ in range(14):
        streaks.append(driver.step().poor_streak)
        assert executor.submitted == 1
    assert streaks == list(range(1, 15))
    assert driver.step().poor_streak == 15
    assert executor.submitted == 2  # the retrain
    later = [driver.step() for _ in range(20)]  # still poor while the retrain is pending
    assert [f.poor_streak for f in later] == list(range(16, 36))
    assert executor.submitted == 2
    assert all(f.model == "linear" for f in later)
    executor.run_all()
    swapped = driver.step()
    assert (swapped.reason, swapped.poor_streak, swapped.model) == (
        "new model swapped in",
        0,
        "constantmodel",
    )
    assert len(fit.calls) == 2


def test_a_long_gap_restarts_history_and_drops_the_model():
    fit = RecordingFit()
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=fit), flat(1000.0))
    driver.step_until(lambda f: f.model == "persistencemodel")
    driver.now_s += 1500  # nothing for longer than max_history_s
    after_gap = driver.step()
    assert after_gap.model == "linear"
    assert after_gap.reason.startswith("no model yet: history")
    driver.step_until(lambda f: f.model == "persistencemodel")
    assert len(fit.calls) == 2
    assert fit.calls[1] * 10.0 < 400  # fitted on the new history only


def test_settings_are_validated():
    with pytest.raises(ValueError, match="min_history_s"):
        ForecastSettings(min_history_s=5000.0, max_history_s=1000.0)
    with pytest.raises(ValueError, match="seasonal_period_s"):
        ForecastSettings(seasonal_period_s="weekly")


def _wave(period_s: float):
    rng = np.random.default_rng(3)
    return lambda t: 1000 + 400 * np.sin(2 * np.pi * t / period_s) + rng.normal(0, 20, t.shape)


def test_an_auto_season_the_first_fit_could_not_see_is_found_once_the_history_shows_it_twice():
    settings = replace(SETTINGS, max_history_s=3600.0, seasonal_period_s="auto")
    fit = RecordingFit()
    driver = Driver(WorkloadForecaster(settings, executor=InlineExecutor(), fit=fit), _wave(900.0))
    seasonal = driver.step_until(lambda f: "fourier" in f.model, max_steps=40)
    assert len(fit.calls) == 2  # the first fit at 300 s saw a third of a period: no season
    assert fit.calls[0] * settings.resolution_s < 900.0
    assert fit.calls[1] * settings.resolution_s >= 2 * 900.0
    assert seasonal.model.endswith("fourier(900s)")
    assert seasonal.reason == "new model swapped in"
    for _ in range(20):  # once the model has its season no further fit runs for it
        driver.step()
    assert len(fit.calls) == 2


def test_a_configured_period_is_taken_once_the_history_covers_it_twice():
    settings = replace(SETTINGS, max_history_s=3600.0, seasonal_period_s=900.0)
    fit = RecordingFit()
    driver = Driver(WorkloadForecaster(settings, executor=InlineExecutor(), fit=fit), _wave(900.0))
    seasonal = driver.step_until(lambda f: "fourier" in f.model, max_steps=40)
    assert len(fit.calls) == 2
    assert fit.calls[1] * settings.resolution_s >= 2 * 900.0
    assert seasonal.model.endswith("fourier(900s)")


class ScoredModel(PersistenceModel):
    """A persistence model with the AICc a fit gave it."""

    def __init__(self, y, aicc: float) -> None:
        super().__init__(y)
        self._aicc = aicc

    def aicc(self) -> float:
        return self._aicc


def test_a_season_the_aicc_left_out_is_not_fitted_again_every_check():
    settings = replace(SETTINGS, max_history_s=3600.0, seasonal_period_s="auto")
    calls: list[bool] = []

    def fit(y, X=None):  # Fourier terms never pay for themselves here
        calls.append(X is not None)
        return ScoredModel(y, aicc=200.0 if X is not None else 100.0)

    driver = Driver(WorkloadForecaster(settings, executor=InlineExecutor(), fit=fit), _wave(900.0))
    plain = driver.step_until(lambda f: "AICc left out" in f.model, max_steps=40)
    assert plain.model.endswith("(AICc left out 900s)")
    assert calls == [False, True, False]  # the first fit, then the season fit and its plain rival
    for _ in range(3 * SEASON_CHECK_ITERATIONS):
        driver.step()
    assert calls == [False, True, False]


@pytest.mark.parametrize("setting", ["auto", None])
def test_no_season_refit_without_a_season_or_without_auto(setting):
    settings = replace(SETTINGS, max_history_s=3600.0, seasonal_period_s=setting)
    fit = RecordingFit()
    noise = np.random.default_rng(4)
    level = _wave(900.0) if setting is None else lambda t: 1000 + noise.normal(0, 20, t.shape)
    driver = Driver(WorkloadForecaster(settings, executor=InlineExecutor(), fit=fit), level)
    forecasts = [driver.step() for _ in range(40)]
    assert len(fit.calls) == 1
    assert not any("fourier" in f.model for f in forecasts)
