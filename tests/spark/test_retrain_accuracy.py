"""What retraining is for: on the day after a multi-day history, the registry model forecasts better
than the daemon's model fitted on the last hour (the full-size check is forecasting/spark/evaluate.py)."""

from __future__ import annotations

from forecasting.registry import ModelRegistry, RegistrySource, serialize
from forecasting.spark.evaluate import following_period_wape
from forecasting.synthetic import DAY_S
from forecasting.types import ForecastSettings


def test_the_registry_model_beats_the_last_hour_model_on_the_following_day(trained, tmp_path):
    result, frame = trained
    split_s = frame.timestamp.iloc[0] + 4 * DAY_S
    history, following = frame[frame.timestamp < split_s], frame[frame.timestamp >= split_s]
    ModelRegistry(tmp_path).publish("shop", serialize(result.model), result.metadata)
    settings = ForecastSettings(
        resolution_s=300.0, min_history_s=3600.0, max_history_s=3600.0, max_interpolated_gap_s=600.0
    )
    source = RegistrySource(tmp_path, "shop", 300.0)
    registry = following_period_wape(history, following, settings, 1800.0, source)
    last_hour = following_period_wape(history, following, settings, 1800.0)
    assert registry.forecasts == last_hour.forecasts > 40  # every 30 min, a 15-min horizon
    assert registry.models.get("arima", 0) > 0.9 * registry.forecasts  # the registry model served
    assert registry.wape < last_hour.wape, (registry, last_hour)
