"""The daemon side: the forecaster starts from the registry's newest model, swaps in newer versions
between iterations (never waiting for a load), keeps updating the model online, and survives restarts."""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from config.load import ConfigError, parse_config
from daemon.build import knowledge_settings
from forecasting.executor import InlineExecutor
from forecasting.online import WorkloadForecaster
from forecasting.registry import ModelRegistry, RegistrySource, serialize
from forecasting.synthetic import DAY_S
from forecasting.types import ForecastSettings
from mape.knowledge import Knowledge

SETTINGS = ForecastSettings(
    resolution_s=300.0, min_history_s=2 * 3600.0, max_history_s=6 * 3600.0, max_interpolated_gap_s=600.0
)


class CountingSource(RegistrySource):
    """The real registry source, counting loads; `gate` (if set) holds a load until released."""

    def __init__(self, *args, gate: threading.Event | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.prepared: list[str] = []
        self.gate = gate

    def prepare(self, version, values, times_s, max_buckets):
        self.prepared.append(version)
        if self.gate is not None:
            assert self.gate.wait(60), "test gate never opened"
        return super().prepare(version, values, times_s, max_buckets)


@pytest.fixture
def live(trained):
    """The day after the training history, as (times, rates) samples every 5 minutes."""
    _, frame = trained
    day = frame[frame.timestamp >= frame.timestamp.iloc[0] + 4 * DAY_S]
    return day.timestamp.to_numpy(), day.rate.to_numpy()


@pytest.fixture
def registry(tmp_path, trained):
    result, _ = trained
    store = ModelRegistry(tmp_path)
    store.publish("shop", serialize(result.model), result.metadata)
    return store


def run(forecaster: WorkloadForecaster, live, until: int, since: int = 0):
    """Observe samples since..until-1 and forecast at the last one's time."""
    times, rates = live
    forecaster.observe(times[since:until], rates[since:until])
    return forecaster.forecast(float(times[until - 1]))


def test_the_newest_model_serves_from_the_first_iteration(registry, live, tmp_path):
    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=3600.0)
    forecaster = WorkloadForecaster(SETTINGS, InlineExecutor(), model_source=source)
    forecast = run(forecaster, live, 4)  # 15 minutes of data, far below min_history_s
    assert forecast.model.startswith("arima(") and forecast.model.endswith("+profile(86400s)")
    assert forecast.reason == "new model swapped in" and forecaster.model_version == "v000001"
    without = WorkloadForecaster(SETTINGS, InlineExecutor())
    assert run(without, live, 4).model in ("linear", "naive")


def test_a_newer_version_is_swapped_in_at_the_next_poll_and_then_updated_online(
    registry, live, tmp_path, trained
):
    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=1800.0)
    forecaster = WorkloadForecaster(SETTINGS, InlineExecutor(), model_source=source)
    run(forecaster, live, 4)
    registry.publish("shop", serialize(trained[0].model), trained[0].metadata)
    for end in range(5, 10):  # 5 iterations of 5 min: before the next poll (30 min)
        run(forecaster, live, end, end - 1)
    assert forecaster.model_version == "v000001" and source.prepared == ["v000001"]
    swapped = [run(forecaster, live, end, end - 1) for end in range(10, 12)]
    assert forecaster.model_version == "v000002" and source.prepared == ["v000001", "v000002"]
    assert swapped[0].reason == "new model swapped in"
    for end in range(12, 120):  # ~9 hours of online updates: the model follows the data, bounded
        forecast = run(forecaster, live, end, end - 1)
    model = forecaster.state_dict()
    restored = WorkloadForecaster.from_state(model, SETTINGS, InlineExecutor())
    held = restored._model.estimator.held
    times, rates = live
    # the sample at times[118] opened a bucket, which closed the one of times[117]: the newest fed
    centre = np.floor(times[117] / 300.0) * 300.0 + 150.0
    assert held.size == SETTINGS.buckets(SETTINGS.max_history_s)
    assert held[-1] == pytest.approx(rates[117] - restored._model.profile(centre)[0])  # minus the season
    assert forecast.model.endswith("+profile(86400s)")


def test_a_damaged_version_is_refused_once_and_the_running_model_kept(registry, live, tmp_path, trained):
    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=300.0)
    forecaster = WorkloadForecaster(SETTINGS, InlineExecutor(), model_source=source)
    run(forecaster, live, 4)
    entry = registry.publish("shop", serialize(trained[0].model), trained[0].metadata)
    (entry.path / "model.pkl").write_bytes(b"not a model")
    forecasts = [run(forecaster, live, end, end - 1) for end in range(5, 9)]
    assert source.prepared == ["v000001", "v000002"]  # refused once, not retried every poll
    assert forecaster.model_version == "v000001"
    assert all(f.model.startswith("arima(") for f in forecasts)


def test_the_loop_never_waits_for_a_load(registry, live, tmp_path):
    gate = threading.Event()
    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=3600.0, gate=gate)
    with ThreadPoolExecutor(max_workers=1) as executor:
        forecaster = WorkloadForecaster(SETTINGS, executor, model_source=source)
        pending = run(forecaster, live, 4)
        assert pending.model in ("linear", "naive") and source.prepared == ["v000001"]
        gate.set()
        assert forecaster.wait_idle(60)
        swapped = run(forecaster, live, 5, 4)
    assert swapped.model.startswith("arima(") and forecaster.model_version == "v000001"


def test_a_restart_keeps_the_version_and_does_not_load_it_again(registry, live, tmp_path):
    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=300.0)
    forecaster = WorkloadForecaster(SETTINGS, InlineExecutor(), model_source=source)
    run(forecaster, live, 4)
    again = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=300.0)
    restored = WorkloadForecaster.from_state(
        forecaster.state_dict(), SETTINGS, InlineExecutor(), model_source=again
    )
    forecast = run(restored, live, 6, 4)
    assert restored.model_version == "v000001" and again.prepared == []
    assert forecast.model.startswith("arima(")


def test_the_retrain_after_poor_forecasts_keeps_the_long_history_profile(registry, live, tmp_path):
    strict = ForecastSettings(**{**SETTINGS.__dict__, "wape_threshold": 1e-9, "retrain_after_poor": 1})
    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=1e9)
    forecaster = WorkloadForecaster(strict, InlineExecutor(), model_source=source)
    run(forecaster, live, 20)
    retrained = run(forecaster, live, 21, 20)  # the previous forecast was "poor": retrained inline
    assert retrained.reason == "new model swapped in" and retrained.poor_streak == 0
    assert retrained.model.endswith("+profile(86400s)") and source.prepared == ["v000001"]


def test_the_config_wires_the_registry_into_the_daemons_forecaster(registry, live, tmp_path):
    forecast = {"resolution_s": 300.0, "max_history_s": 21600.0, "max_interpolated_gap_s": 600.0}
    config = parse_config({"forecast": {**forecast, "registry_path": str(tmp_path), "registry_job": "shop"}})
    knowledge = Knowledge.fresh(knowledge_settings(config, InlineExecutor))
    assert run(knowledge.forecaster, live, 4).model.startswith("arima(")
    plain = Knowledge.fresh(knowledge_settings(parse_config({"forecast": forecast}), InlineExecutor))
    assert run(plain.forecaster, live, 4).model in ("linear", "naive")
    with pytest.raises(ConfigError, match="registry_job"):
        parse_config({"forecast": {"registry_path": str(tmp_path)}})


def test_a_version_that_loads_but_cannot_forecast_is_refused_and_the_running_model_kept(
    registry, live, tmp_path, trained
):
    """A Holt-Winters level of NaN: the model loads and takes data, but every forecast is NaN."""
    from dataclasses import replace

    from forecasting.spark.models import HoltWinters

    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=300.0)
    forecaster = WorkloadForecaster(SETTINGS, InlineExecutor(), model_source=source)
    run(forecaster, live, 4)
    times, _ = live
    nan_level = HoltWinters(
        0.5, 0.1, 0.0, 300.0, 300.0, float("nan"), 0.0, np.zeros(1), int(times[0] // 300) - 1
    )
    broken = replace(trained[0].model, family="holt-winters", estimator=nan_level, profile=None)
    registry.publish("shop", serialize(broken), trained[0].metadata)
    forecasts = [run(forecaster, live, end, end - 1) for end in range(5, 9)]
    assert source.prepared == ["v000001", "v000002"] and forecaster.model_version == "v000001"
    assert all(f.model.startswith("arima(") and np.isfinite(f.rates_rps).all() for f in forecasts)


def test_a_version_number_reused_for_new_content_is_loaded(registry, live, tmp_path, trained):
    """A damaged v2 is refused; deleted and published again (the number is reused), it is loaded."""
    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=300.0)
    forecaster = WorkloadForecaster(SETTINGS, InlineExecutor(), model_source=source)
    run(forecaster, live, 4)
    entry = registry.publish("shop", serialize(trained[0].model), trained[0].metadata)
    (entry.path / "metadata.json").write_text('{"artifact": {"file": "model.pkl", "sha256": "0"}}')
    run(forecaster, live, 5, 4)
    assert forecaster.model_version == "v000001" and source.prepared == ["v000001", "v000002"]
    restored = WorkloadForecaster.from_state(
        forecaster.state_dict(), SETTINGS, InlineExecutor(), model_source=source
    )
    run(restored, live, 6, 5)
    assert source.prepared == ["v000001", "v000002"]  # refused content is not loaded again at once
    shutil.rmtree(entry.path)
    assert registry.publish("shop", serialize(trained[0].model), trained[0].metadata).name == "v000002"
    run(restored, live, 7, 6)
    assert restored.model_version == "v000002" and source.prepared[-1] == "v000002"


def test_a_version_refused_for_a_missing_artifact_is_tried_again_later(registry, live, tmp_path, trained):
    """The artifact is still being copied in at the first poll; an hour later it is there and loaded."""
    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=300.0)
    forecaster = WorkloadForecaster(SETTINGS, InlineExecutor(), model_source=source)
    run(forecaster, live, 4)
    entry = registry.publish("shop", serialize(trained[0].model), trained[0].metadata)
    (entry.path / "model.pkl").rename(tmp_path / "copying")
    run(forecaster, live, 5, 4)
    (tmp_path / "copying").rename(entry.path / "model.pkl")
    for end in range(6, 16):  # 50 minutes: not yet
        run(forecaster, live, end, end - 1)
    assert forecaster.model_version == "v000001" and source.prepared.count("v000002") == 1
    for end in range(16, 19):
        run(forecaster, live, end, end - 1)
    assert forecaster.model_version == "v000002" and source.prepared.count("v000002") == 2


def test_a_newest_version_refused_leaves_the_one_before_it_running(registry, live, tmp_path, trained):
    """v000002 was trained for 60 s buckets (retrain without --config): a fresh daemon at 300 s refuses
    it and, from the next iteration on, runs v000001 instead of none."""
    result, _ = trained
    registry.publish("shop", serialize(result.model), {**result.metadata, "resolution_s": 60.0})
    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=3600.0)
    forecaster = WorkloadForecaster(SETTINGS, InlineExecutor(), model_source=source)
    run(forecaster, live, 4)
    assert forecaster.model_version is None and source.prepared == ["v000002"]
    run(forecaster, live, 5, 4)
    assert forecaster.model_version == "v000001" and source.prepared == ["v000002", "v000001"]
    run(forecaster, live, 6, 5)
    assert source.prepared == ["v000002", "v000001"]  # neither loaded again within the hour


def test_a_model_whose_history_ends_after_the_daemons_data_is_refused(registry, trained, tmp_path):
    """Local time read as UTC: the history ends an hour after the daemon's newest bucket, and its
    Holt-Winters state would drop every one of the daemon's buckets as late."""
    _, frame = trained
    end_s = frame.timestamp.iloc[0] + 4 * DAY_S  # where the training history ends
    earlier = frame[(frame.timestamp >= end_s - 5 * 3600.0) & (frame.timestamp < end_s - 3600.0)]
    source = CountingSource(tmp_path, "shop", 300.0, poll_interval_s=3600.0)
    forecaster = WorkloadForecaster(SETTINGS, InlineExecutor(), model_source=source)
    run(forecaster, (earlier.timestamp.to_numpy(), earlier.rate.to_numpy()), len(earlier))
    assert source.prepared == ["v000001"] and forecaster.model_version is None
