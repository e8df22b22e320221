"""The linear-trend fallback and the naive hold."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting.fallback import linear_trend_forecast, naive_forecast


def test_linear_is_exact_on_a_line():
    times_s = np.arange(0.0, 600.0, 10.0)
    at_s = np.arange(601.0, 1501.0)
    forecast = linear_trend_forecast(times_s, 5000 + 2.5 * times_s, at_s)
    np.testing.assert_allclose(forecast, 5000 + 2.5 * at_s, rtol=1e-9)


def test_linear_is_exact_at_epoch_sized_times():
    times_s = 1.7e9 + np.arange(0.0, 600.0, 10.0)
    at_s = 1.7e9 + np.arange(601.0, 1501.0)
    forecast = linear_trend_forecast(times_s, 100 + 0.5 * (times_s - 1.7e9), at_s)
    np.testing.assert_allclose(forecast, 100 + 0.5 * (at_s - 1.7e9), rtol=1e-7)


def test_a_falling_line_is_clipped_at_zero():
    times_s = np.arange(0.0, 100.0)
    forecast = linear_trend_forecast(times_s, 100.0 - times_s, np.arange(50.0, 300.0))
    assert forecast.min() == 0.0
    np.testing.assert_allclose(forecast[:50], 100.0 - np.arange(50.0, 100.0), atol=1e-9)
    assert np.all(forecast[51:] == 0.0)


def test_least_squares_through_noise_and_nan():
    times_s = np.arange(0.0, 10.0)
    rates = np.array([0, 2, 0, 2, 0, 2, 0, 2, 0, 2], dtype=float)  # mean 1, slope 2/15 by least squares
    rates_with_nan = np.append(rates, np.nan)
    forecast = linear_trend_forecast(np.append(times_s, 10.0), rates_with_nan, np.array([4.5, 19.5]))
    assert forecast[0] == pytest.approx(1.0)
    assert forecast[1] == pytest.approx(1.0 + 15 * (np.cov(times_s, rates)[0, 1] / np.var(times_s, ddof=1)))


def test_one_point_degrades_to_holding_it():
    np.testing.assert_array_equal(linear_trend_forecast([5.0], [42.0], np.arange(3.0)), [42.0] * 3)


def test_naive_holds_the_last_finite_value_or_zero():
    np.testing.assert_array_equal(naive_forecast(np.array([3.0, 7.0, np.nan]), 2), [7.0, 7.0])
    np.testing.assert_array_equal(naive_forecast(np.array([]), 2), [0.0, 0.0])
