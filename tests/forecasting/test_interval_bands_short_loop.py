"""Every lead-time band of the upper bound and the bias correction learns at any loop interval
(forecasting/interval.py): kept forecasts leave by age, not by count, and stay few at a 0.1 s loop."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting.executor import InlineExecutor
from forecasting.interval import BAND_S, PeakErrors
from forecasting.online import WorkloadForecaster
from forecasting.types import ForecastSettings
from tests.forecasting.fakes import ConstantModel

BUCKET_S = 10.0


def _looped(horizon_s: int, interval_s: float, duration_s: float) -> tuple[PeakErrors, int]:
    """Forecasts of a flat 1,000 rps every `interval_s` while the load runs at 1,500, judged as the
    forecaster does (what arrived first, then keep the new one); also the most forecasts ever kept."""
    errors = PeakErrors(horizon_s, min_samples=10)
    most_kept = 0
    for now_s in np.arange(interval_s, duration_s, interval_s):
        centres_s = np.arange(BUCKET_S / 2, now_s - BUCKET_S / 2, BUCKET_S)  # complete buckets only
        errors.learn(centres_s, np.full(len(centres_s), 1_500.0))
        errors.record(float(now_s), np.full(horizon_s, 1_000.0))
        most_kept = max(most_kept, len(errors._pending))
    return errors, most_kept


@pytest.mark.parametrize("interval_s", [30.0, 45.0, 10.0])
def test_every_band_learns_at_a_loop_faster_than_a_band(interval_s):
    errors, _ = _looped(900, interval_s, 2 * 3_600.0)
    assert errors.bands == 15
    assert np.allclose(errors.factors(0.9), 1.5)  # the last band too, not left at 1
    assert np.allclose(errors.central(np.full(900, 1_000.0)), 1_500.0)


def test_at_a_tenth_of_a_second_every_band_learns_and_few_forecasts_are_kept():
    errors, most_kept = _looped(300, 0.1, 900.0)
    assert np.allclose(errors.factors(0.9), 1.5)
    assert most_kept <= 2 * (errors.bands + 1) + 1


@pytest.mark.parametrize("jitter_s", [0.0, 0.3])
def test_at_the_default_loop_every_forecast_is_judged_in_every_band(jitter_s):
    """A 60 s loop, on time or a little early or late in turn: all forecasts are kept, none skipped."""
    errors = PeakErrors(900, window=1_000)
    starts_s = [60.0 * i + jitter_s * (-1) ** i for i in range(1, 41)]
    for start_s in starts_s:
        centres_s = np.arange(BUCKET_S / 2, start_s - BUCKET_S / 2, BUCKET_S)
        errors.learn(centres_s, np.full(len(centres_s), 1_500.0))
        errors.record(start_s, np.full(900, 1_000.0))
    judged = [len(ratios) for ratios in errors._ratios]
    covered = [sum(s + (band + 1) * BAND_S < starts_s[-1] - BUCKET_S for s in starts_s) for band in range(15)]
    assert judged == covered


def test_a_clock_gone_back_does_not_stop_the_learning():
    errors = PeakErrors(300, min_samples=1)
    errors.record(10_000.0, np.full(300, 1_000.0))
    errors.record(100.0, np.full(300, 1_000.0))  # the clock went back
    errors.learn(np.arange(105.0, 170.0, BUCKET_S), np.full(7, 2_000.0))  # the first band after 100 s
    assert errors.factors(0.5)[0] == 2.0


def test_the_forecaster_at_a_30_s_loop_raises_the_whole_horizon():
    """A model that says 500 rps of a load at 1,000, a forecast every 30 s: after two hours the upper bound
    and the planned (bias-corrected) rates of the horizon's last minute reach the load too."""
    settings = ForecastSettings(
        horizon_s=900.0, min_history_s=300.0, max_history_s=1_200.0, wape_threshold=10.0
    )
    forecaster = WorkloadForecaster(settings, InlineExecutor(), fit=lambda y, X=None: ConstantModel(y, 500.0))
    for now_s in range(30, 7_200 + 1, 30):
        seconds = np.arange(now_s - 29, now_s + 1, dtype=float)
        forecaster.observe(seconds, np.full(len(seconds), 1_000.0))
        forecast = forecaster.forecast(float(now_s))
    assert forecast.rates_rps[-1] == pytest.approx(500.0)
    assert forecast.upper_rps[-1] == pytest.approx(1_000.0)
    assert forecast.planned_rps[-1] == pytest.approx(1_000.0)
