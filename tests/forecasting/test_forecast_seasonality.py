"""Seasonality: the period found in a history, and Fourier terms in absolute time."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting.arima import seasonal_period_s
from forecasting.seasonality import detect_period_s, fourier_terms

RESOLUTION_S = 10.0


def seasonal_series(period_s: float, span_s: float, seed: int = 1) -> np.ndarray:
    """A season plus a trend plus noise, sampled at bucket centres."""
    times_s = np.arange(0.0, span_s, RESOLUTION_S) + RESOLUTION_S / 2
    rng = np.random.default_rng(seed)
    season = 1000 * np.sin(2 * np.pi * times_s / period_s) + 300 * np.sin(4 * np.pi * times_s / period_s)
    return 20_000 + 0.5 * times_s + season + rng.normal(0, 150, times_s.size)


@pytest.mark.parametrize("period_s", [600.0, 1800.0, 3600.0])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_known_period_is_found_within_two_percent(period_s, seed):
    found = detect_period_s(seasonal_series(period_s, span_s=3.2 * period_s, seed=seed), RESOLUTION_S)
    assert found == pytest.approx(period_s, rel=0.02)


def test_under_two_periods_of_history_no_period_is_claimed():
    assert detect_period_s(seasonal_series(1800.0, span_s=1.8 * 1800.0), RESOLUTION_S) != pytest.approx(
        1800.0, abs=60
    )


@pytest.mark.parametrize(
    "values",
    [np.random.default_rng(3).normal(100, 10, 500), 100 + 3 * np.arange(500.0), np.full(500, 7.0)],
    ids=["white-noise", "trend", "constant"],
)
def test_series_without_a_season_have_no_period(values):
    assert detect_period_s(values, RESOLUTION_S) is None


@pytest.mark.parametrize("seed", range(5))
def test_noise_over_a_short_history_has_no_period(seed):
    # 30 buckets: a lag near 15 rests on ~15 pairs, where noise alone often passes an autocorrelation of 0.3
    values = np.random.default_rng(seed).normal(1000, 20, 30)
    assert detect_period_s(values, RESOLUTION_S) is None


def test_fourier_terms_depend_on_absolute_time_only():
    times_s = np.array([5.0, 125.0, 1e9 + 5.0])
    terms = fourier_terms(times_s, period_s=600.0, order=2)
    assert terms.shape == (3, 4)
    shifted = fourier_terms(times_s + 3 * 600.0, period_s=600.0, order=2)
    np.testing.assert_allclose(shifted, terms, atol=1e-9)
    phase = 2 * np.pi * 125.0 / 600.0
    np.testing.assert_allclose(terms[1], [np.sin(phase), np.sin(2 * phase), np.cos(phase), np.cos(2 * phase)])


def test_a_configured_period_is_used_only_with_two_periods_of_history():
    values = np.ones(100)  # 1000 s at 10 s
    assert seasonal_period_s(500.0, values, RESOLUTION_S) == 500.0
    assert seasonal_period_s(600.0, values, RESOLUTION_S) is None
    assert seasonal_period_s(None, values, RESOLUTION_S) is None
