"""The ARIMA wrapper: labels, bounded updates, predictions checked before use."""

from __future__ import annotations

import numpy as np
import pytest
from pmdarima.arima import ARIMA

from forecasting.arima import FittedModel, advance, fit_auto_arima, fit_model, predict
from tests.forecasting.fakes import PersistenceModel, RecordingFit

RESOLUTION_S = 10.0


def ar1_series(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = np.empty(n)
    values[0] = 0.0
    for i in range(1, n):
        values[i] = 0.7 * values[i - 1] + rng.normal(0, 10)
    return 1000 + values


def centres(start: int, stop: int) -> np.ndarray:
    return (np.arange(start, stop) + 0.5) * RESOLUTION_S


def test_labels_name_the_order_and_the_season():
    arima = ARIMA(order=(2, 1, 1))
    assert FittedModel(arima, None, 2).label == "arima(2,1,1)"
    assert FittedModel(arima, 3600.0, 2).label == "arima(2,1,1)+fourier(3600s)"
    assert FittedModel(PersistenceModel([1.0]), None, 2).label == "persistencemodel"


def test_advance_keeps_the_model_data_within_the_bound_with_the_same_order():
    values = ar1_series(260)
    max_buckets = 200
    model = FittedModel(ARIMA(order=(1, 0, 0), suppress_warnings=True).fit(values[:190]), None, 2)
    model = advance(model, values[:196], centres(0, 196), new_buckets=6, max_buckets=max_buckets)
    assert len(model.estimator.arima_res_.data.endog) == 196  # below the bound: a plain update
    for end in range(202, 261, 6):
        window = slice(max(0, end - 220), end)  # the retained history, longer than the bound
        model = advance(
            model, values[window], centres(window.start, end), new_buckets=6, max_buckets=max_buckets
        )
        held = model.estimator.arima_res_.data.endog
        assert len(held) == max_buckets
        np.testing.assert_array_equal(np.ravel(held), values[end - max_buckets : end])  # the latest, in order
    assert model.estimator.order == (1, 0, 0)
    assert model.estimator.params()[1] == pytest.approx(0.7, abs=0.15)  # the AR coefficient survives


def test_fit_model_adds_fourier_terms_only_with_two_periods_of_history():
    fit = RecordingFit()
    seen_exog = []

    def spy(y, X=None):
        seen_exog.append(X)
        return fit(y, X)

    short = fit_model(spy, np.ones(100), centres(0, 100), RESOLUTION_S, 600.0, fourier_order=2)
    long = fit_model(spy, np.ones(120), centres(0, 120), RESOLUTION_S, 600.0, fourier_order=2)
    assert short.period_s is None and seen_exog[0] is None
    assert long.period_s == 600.0 and seen_exog[1].shape == (120, 4)


def test_seasonal_arima_forecasts_a_season_it_has_seen_twice():
    period_s = 600.0
    times_s = centres(0, 240)  # 4 periods
    season = lambda t: 5000 + 1000 * np.sin(2 * np.pi * t / period_s)  # noqa: E731
    values = season(times_s) + np.random.default_rng(2).normal(0, 30, times_s.size)
    model = fit_model(fit_auto_arima, values, times_s, RESOLUTION_S, "auto", fourier_order=2)
    assert model.period_s == pytest.approx(period_s, rel=0.02)
    assert model.label.endswith(f"+fourier({model.period_s:g}s)")
    future_s = centres(240, 330)  # 15 minutes
    error = np.abs(predict(model, future_s) - season(future_s)).sum() / season(future_s).sum()
    assert error < 0.05


@pytest.mark.parametrize("seed", [2, 5])
def test_an_auto_period_that_does_not_lower_the_aicc_is_left_out(seed):
    """Two one-minute spikes 115 buckets apart: the autocorrelation passes that lag as a period seen
    twice, but Fourier terms of it explain nothing a plain ARIMA does not (the AICc says so)."""
    rng = np.random.default_rng(seed)
    values = 1000 + rng.normal(0, 20, 240)
    values[60:66] += 800
    values[175:181] += 800
    times_s = centres(0, 240)
    model = fit_model(fit_auto_arima, values, times_s, RESOLUTION_S, "auto", fourier_order=2)
    assert model.period_s is None and model.exog(times_s) is None
    assert model.rejected_period_s == pytest.approx(1150.0)
    assert model.label.endswith("(AICc left out 1150s)")
    configured = fit_model(fit_auto_arima, values, times_s, RESOLUTION_S, 1150.0, fourier_order=2)
    assert configured.period_s == 1150.0  # a configured period is the user's word


class BrokenModel(PersistenceModel):
    def predict(self, n_periods, X=None):
        return np.full(n_periods, np.nan)


def test_non_finite_predictions_are_refused():
    with pytest.raises(ValueError, match="not finite"):
        predict(FittedModel(BrokenModel([1.0]), None, 2), centres(0, 5))


def test_a_constant_load_is_forecast_at_its_level_not_at_zero():
    # pmdarima's auto_arima returns ARIMA(0,0,0) without an intercept for a constant series: a forecast of 0
    model = fit_auto_arima(np.full(60, 40_000.0))
    assert np.allclose(model.predict(n_periods=3), 40_000.0)
