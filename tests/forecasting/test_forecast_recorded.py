"""On a workload recorded with the Daedalus paper, ARIMA's 15-minute forecasts are accurate."""

from __future__ import annotations

import numpy as np

from forecasting.replay import median_wape_by_model, read_trace, replay
from forecasting.types import ForecastSettings


def test_arima_forecasts_of_the_sine_trace_are_well_under_the_wape_threshold(recorded_workloads):
    rates = read_trace(str(recorded_workloads / "sine_60000_6h.csv"))[:7200]  # the first 2 hours
    settings = ForecastSettings()  # 10-s buckets, 15-min horizon, first fit after 30 min
    steps = replay(rates, settings, interval_s=60)
    arima = [s for s in steps if s.model.startswith("arima")]
    assert len(arima) >= 60  # every iteration from the first fit on (30 min .. 1 h 45 min)
    median, count = median_wape_by_model(steps)["arima"]
    assert count == len(arima)
    # Measured 0.2-0.5% on this trace; 5% keeps a wide margin and stays 5× under the 25% threshold.
    assert median < 0.05
    assert np.percentile([s.horizon_wape for s in arima], 90) < settings.wape_threshold
