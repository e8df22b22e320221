"""Hostile inputs to the forecaster: explosive or level-less models, clock steps, damaged or foreign
saved state, and surges that look like a season. Each gets a log line or a safe decision, never a
forecast the planner cannot use nor an exception out of the loop."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from structlog.testing import capture_logs

from forecasting.arima import fit_auto_arima
from forecasting.executor import InlineExecutor
from forecasting.grid import BucketGrid
from forecasting.online import WorkloadForecaster
from forecasting.types import ForecastSettings
from messages.types import MAX_RATE_RPS
from tests.forecasting.fakes import ConstantModel, Driver, PersistenceModel, RecordingFit

SETTINGS = ForecastSettings(
    resolution_s=10.0, horizon_s=300.0, min_history_s=300.0, max_history_s=1200.0, linear_window_s=120.0
)
T0_S = 1_700_000_000  # an epoch-sized clock, as the daemon's


def flat(level: float):
    return lambda t: np.full(t.shape, level)


def forecaster(fit=None, settings: ForecastSettings = SETTINGS) -> WorkloadForecaster:
    return WorkloadForecaster(settings, executor=InlineExecutor(), fit=fit or RecordingFit())


def events(logs: list[dict], name: str) -> list[dict]:
    return [e for e in logs if e["event"] == name]


# -- 1: explosive forecasts ---------------------------------------------------------------------------


EXPLOSIVE = pytest.mark.parametrize(
    ("level", "says"), [(1e30, "above the cap"), (np.nan, "not finite")], ids=["1e30", "nan"]
)


@EXPLOSIVE
def test_a_model_forecasting_an_explosive_level_is_refused_and_the_fallback_serves(level, says):
    fit = RecordingFit(make=lambda y, call: ConstantModel(y, level=level))
    driver = Driver(forecaster(fit), flat(1000.0))
    with capture_logs() as logs:
        forecasts = [driver.step() for _ in range(10)]
    assert fit.calls  # a fit ran and returned the explosive model
    assert all(f.model == "linear" for f in forecasts)
    assert max(f.planned_rps.max() for f in forecasts) == pytest.approx(1000.0)
    assert says in events(logs, "forecast_model_refused")[0]["error"]


class ExplodingModel(PersistenceModel):
    """Tracks the data until `explode` is set to a level (1e30: finite; NaN), then forecasts it."""

    explode: float | None = None

    def predict(self, n_periods, X=None):
        explode = ExplodingModel.explode
        return np.full(n_periods, self.received[-1] if explode is None else explode)


@EXPLOSIVE
def test_a_running_model_that_turns_explosive_is_not_served(monkeypatch, level, says):
    monkeypatch.setattr(ExplodingModel, "explode", None)
    driver = Driver(forecaster(RecordingFit(make=lambda y, call: ExplodingModel(y))), flat(1000.0))
    driver.step_until(lambda f: f.model == "explodingmodel")
    monkeypatch.setattr(ExplodingModel, "explode", level)
    with capture_logs() as logs:
        forecast = driver.step()
    assert forecast.model == "linear"
    assert forecast.planned_rps.max() == pytest.approx(1000.0)
    assert says in events(logs, "forecast_predict_failed")[0]["error"]


def test_the_linear_fallback_never_forecasts_above_the_largest_valid_rate():
    ramp = lambda t: np.clip((t - 60.0) * 5e6, 0.0, None)  # noqa: E731  0 -> 9e8 rps in three minutes
    forecast = Driver(forecaster(), ramp).step(240)
    assert forecast.model == "linear"
    assert forecast.rates_rps.max() == MAX_RATE_RPS


# -- 4: level lost (no intercept) ---------------------------------------------------------------------


def test_an_undifferenced_fit_of_a_level_load_keeps_its_intercept():
    """A flat 40k rps load whose last bucket read 0 (a metrics dropout): auto_arima's AIC chose an ARMA
    without intercept, whose forecast reverted to 0 (below it, in fact)."""
    values = np.full(180, 40_000.0)
    values[-1] = 0.0
    model = fit_auto_arima(values)
    assert model.order[1] == 0 and model.with_intercept
    assert model.predict(n_periods=90).mean() > 30_000.0


# -- 2: wall-clock steps ------------------------------------------------------------------------------


def test_a_clock_stepped_forward_and_back_blinds_the_forecaster_only_briefly():
    driver = Driver(forecaster(), flat(1000.0))
    driver.now_s = T0_S
    driver.step_until(lambda f: f.model == "persistencemodel")
    resumed_s = driver.now_s + 60
    driver.now_s += 3 * 3600  # one iteration with the clock three hours ahead ...
    driver.step()
    driver.now_s, driver.level = resumed_s, flat(5000.0)  # ... then corrected; the load rises
    with capture_logs() as logs:
        forecasts = [driver.step() for _ in range(3)]
    assert "the clock went back" in events(logs, "forecast_history_restarted")[0]["reason"]
    assert forecasts[-1].rates_rps[0] == pytest.approx(5000.0)
    assert driver.forecaster._grid.late_samples == 0


def test_samples_ahead_of_the_loop_clock_are_dropped_with_a_log_line():
    fc = forecaster()
    stamps = T0_S + np.arange(1.0, 61.0)
    fc.observe(stamps, np.full(60, 1000.0), now_s=T0_S + 60.0)
    with capture_logs() as logs:
        fc.observe(stamps + 3 * 3600, np.full(60, 9000.0), now_s=T0_S + 120.0)
    assert events(logs, "forecast_samples_ahead_dropped")[0]["samples"] == 60
    assert fc._grid.watermark_s == T0_S + 60.0


# -- 6: damaged saved grid, and observe never raises --------------------------------------------------


def saved_state(settings: ForecastSettings = SETTINGS) -> tuple[dict, int]:
    """A forecaster's state after ten minutes of 1000 rps, as a knowledge store keeps it (JSON)."""
    driver = Driver(forecaster(settings=settings), flat(1000.0))
    driver.now_s = T0_S
    for _ in range(10):
        driver.step()
    state = json.loads(json.dumps({k: v for k, v in driver.forecaster.state_dict().items() if k != "model"}))
    return {**state, "model": None}, driver.now_s


def test_a_damaged_saved_grid_gives_a_fresh_history_and_observe_keeps_working():
    state, now_s = saved_state()
    state["grid"]["values"][-1] = float("nan")
    with capture_logs() as logs:
        restored = WorkloadForecaster.from_state(state, SETTINGS, executor=InlineExecutor())
    assert events(logs, "forecast_state_not_restored")
    driver = Driver(restored, flat(2000.0))
    driver.now_s = now_s
    for _ in range(3):
        forecast = driver.step()
    assert forecast.rates_rps[0] == pytest.approx(2000.0)


@pytest.mark.parametrize(
    "damage",
    [
        lambda g: g["values"].append(1.0),  # values and observed differ in length
        lambda g: g["values"].__setitem__(0, -5.0),
        lambda g: g["values"].__setitem__(0, 1e300),
        lambda g: g["open_timestamps_s"].__setitem__(0, g["first"] * 10.0),  # before the grid's end
        lambda g: g["open_rates_rps"].append(1.0),
        # buckets in the future and no newest sample: every sample after it taken for late
        lambda g: g.update(first=10**14, watermark_s=None, open_timestamps_s=[], open_rates_rps=[]),
    ],
)
def test_grid_load_state_refuses_what_add_could_not_have_produced(damage):
    grid = BucketGrid(10.0, max_gap_buckets=3, retention_buckets=100, reset_gap_buckets=100)
    grid.add(np.arange(0.0, 100.0, 5.0), np.full(20, 7.0))
    state = json.loads(json.dumps(grid.state_dict()))
    damage(state)
    fresh = BucketGrid(10.0, max_gap_buckets=3, retention_buckets=100, reset_gap_buckets=100)
    with pytest.raises(ValueError):
        fresh.load_state(state)
    assert fresh.values.size == 0  # left as it was


def test_observe_never_raises_a_grid_failure_it_restarts_the_history(monkeypatch):
    driver = Driver(forecaster(), flat(1000.0))
    driver.step_until(lambda f: f.model == "persistencemodel")
    broken = driver.forecaster._grid

    def fail(*args, **kwargs):
        raise ValueError("fill_gaps needs finite values at both ends")

    monkeypatch.setattr(broken, "add", fail)
    with capture_logs() as logs:
        driver.step()
        driver.forecaster.observe(np.arange(3.0), np.arange(2.0))  # lengths differ: refused, no raise
    assert events(logs, "forecast_observe_failed")
    assert events(logs, "forecast_samples_refused")
    assert driver.forecaster._grid is not broken
    assert driver.forecaster._grid.epoch == broken.epoch + 1
    assert driver.step().rates_rps[0] == pytest.approx(1000.0)


# -- 8: resolution changed between saving and restoring -----------------------------------------------


def test_a_state_saved_at_another_resolution_starts_a_fresh_grid_and_model():
    state, now_s = saved_state()
    coarser = replace(SETTINGS, resolution_s=20.0)
    with capture_logs() as logs:
        restored = WorkloadForecaster.from_state(state, coarser, executor=InlineExecutor())
    assert "resolution" in events(logs, "forecast_state_not_restored")[0]["error"]
    driver = Driver(restored, flat(8000.0))
    driver.now_s = now_s
    forecast = driver.step()
    for _ in range(3):
        forecast = driver.step()
    assert forecast.rates_rps[0] == pytest.approx(8000.0)
    assert restored._grid.late_samples == 0


def test_an_old_state_without_its_resolution_is_refused_when_its_indices_cannot_be_this_one():
    state, _ = saved_state()
    state["grid"].pop("resolution_s", None)  # as saved before the resolution was stored
    coarser = replace(SETTINGS, resolution_s=20.0)
    with capture_logs() as logs:
        restored = WorkloadForecaster.from_state(state, coarser, executor=InlineExecutor())
    assert "after its newest sample" in events(logs, "forecast_state_not_restored")[0]["error"]
    assert restored._grid.values.size == 0
    same = WorkloadForecaster.from_state(state, SETTINGS, executor=InlineExecutor())
    assert same._grid.values.size == 60  # at the resolution it was saved in, it is kept


def test_a_grid_that_cannot_be_restored_keeps_the_peak_errors_and_the_refused_version():
    """A fresh history, but the upper bound's learned errors and the registry version refused last do not
    depend on it: they were lost with it."""
    state, _ = saved_state()
    state["peak_errors"] = {"ratios": [[1.5] * 20] * 15, "mean_ratios": [[1.2] * 20] * 15}
    state["rejected"] = ["v7", "wape 0.9 > 0.25", 1_000.0]
    state["grid"]["values"][-1] = float("nan")
    restored = WorkloadForecaster.from_state(state, SETTINGS, executor=InlineExecutor())
    assert restored._grid.values.size == 0
    assert np.allclose(restored._peak_errors.upper(np.full(60, 100.0)), 150.0)
    assert restored._rejected == ("v7", "wape 0.9 > 0.25", 1_000.0)


@pytest.mark.parametrize(
    "damage",
    [
        {"peak_errors": {"ratios": [[None, "x", True, -1.0, 1.5]], "mean_ratios": 5}},
        {"rejected": ["v1"]},
        {"poor_streak": -(10**6)},
    ],
    ids=["peak-errors", "rejected", "poor-streak"],
)
def test_a_damaged_judgement_is_dropped_alone_and_the_model_and_history_kept(damage):
    """One bad entry used to lose the history and model beside it; a streak stored far below 0 kept every
    poor forecast from asking for a refit."""
    state, _ = saved_state()
    with capture_logs():
        restored = WorkloadForecaster.from_state({**state, **damage}, SETTINGS, executor=InlineExecutor())
    assert restored._grid.values.size == 60
    assert restored._rejected is None and restored._poor_streak == 0
    saved = [1.5] if "peak_errors" in damage else state["peak_errors"]["ratios"][0]
    assert list(restored._peak_errors._ratios[0]) == saved


def test_the_upper_bound_is_never_below_the_bias_corrected_forecast():
    """The bias factor is the median of the mean ratios and can exceed the peak ratios' quantile."""
    state, now_s = saved_state()
    state["peak_errors"] = {"ratios": [[0.9] * 20] * 30, "mean_ratios": [[1.6] * 20] * 30}
    driver = Driver(WorkloadForecaster.from_state(state, SETTINGS, executor=InlineExecutor()), flat(1000.0))
    driver.now_s = now_s
    forecast = driver.step()
    assert forecast.central_rps.max() > forecast.rates_rps.max()
    assert np.all(forecast.upper_rps >= forecast.central_rps)


class CountingPolls:
    """A registry that never has a model, counting how often it is asked."""

    poll_interval_s = 600.0

    def __init__(self) -> None:
        self.polls = 0

    def newest_version(self) -> None:
        self.polls += 1


def test_a_clock_stepped_back_polls_the_registry_again_at_once():
    """The next poll was due a poll interval after the clock's old reading: a day's step, a day of none."""
    registry = CountingPolls()
    driver = Driver(WorkloadForecaster(SETTINGS, InlineExecutor(), RecordingFit(), registry), flat(1000.0))
    driver.now_s = T0_S
    driver.step()
    assert registry.polls == 1
    driver.now_s -= 86_400
    for _ in range(5):
        driver.step()
    assert registry.polls == 2
