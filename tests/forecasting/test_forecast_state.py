"""A restarted daemon resumes from state_dict(): same model, history, streak, last forecast."""

from __future__ import annotations

import json
import lzma
import pickle

import numpy as np
import pytest

from forecasting.executor import InlineExecutor
from forecasting.online import WorkloadForecaster
from forecasting.types import ForecastSettings
from tests.forecasting.fakes import Driver, ManualExecutor, RecordingFit

SETTINGS = ForecastSettings(
    resolution_s=10.0, horizon_s=300.0, min_history_s=600.0, max_history_s=900.0, linear_window_s=120.0
)
NOISE = np.random.default_rng(11).normal(0, 40, 4000)


def workload(t: np.ndarray) -> np.ndarray:
    return 5000 + 600 * np.sin(2 * np.pi * t / 1800) + NOISE[t.astype(int)]


def through_json(state: dict) -> dict:
    """What a knowledge store would keep: JSON for everything but the pickled model."""
    text = json.dumps({k: v for k, v in state.items() if k != "model"}, allow_nan=False)
    return {**json.loads(text), "model": state["model"]}


def test_restored_forecaster_gives_the_identical_next_forecasts_with_a_real_arima():
    original = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor()), workload)
    original.step_until(lambda f: f.model.startswith("arima"))
    for _ in range(3):
        original.step()
    state = original.forecaster.state_dict()
    assert isinstance(state["model"], bytes)
    restored = Driver(
        WorkloadForecaster.from_state(through_json(state), SETTINGS, executor=InlineExecutor()), workload
    )
    restored.now_s = original.now_s
    assert restored.forecaster.last_forecast.to_dict() == original.forecaster.last_forecast.to_dict()
    for _ in range(8):  # past max_history_s, so the bounded refit runs on both sides too
        expected, got = original.step(), restored.step()
        np.testing.assert_array_equal(got.rates_rps, expected.rates_rps)
        assert (got.model, got.reason, got.last_wape, got.poor_streak) == (
            expected.model,
            expected.reason,
            expected.last_wape,
            expected.poor_streak,
        )
    assert expected.model.startswith("arima")


def test_the_saved_model_is_compressed_and_a_bare_pickle_of_an_older_store_still_loads():
    original = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor()), workload)
    original.step_until(lambda f: f.model.startswith("arima"))
    state = original.forecaster.state_dict()
    bare = pickle.dumps(original.forecaster._model)
    assert len(state["model"]) < len(bare) / 3, "the Kalman filter's arrays compress well"
    for blob in (state["model"], bare):
        restored = WorkloadForecaster.from_state(
            {**state, "model": blob}, SETTINGS, executor=InlineExecutor()
        )
        assert restored._model_fingerprint == original.forecaster._model_fingerprint
        assert pickle.dumps(restored._model) == pickle.dumps(pickle.loads(bare))  # the same model


def test_a_fit_in_flight_when_saved_is_submitted_again_after_restore():
    executor = ManualExecutor()
    original = Driver(WorkloadForecaster(SETTINGS, executor=executor, fit=RecordingFit()), workload)
    original.step_until(lambda f: executor.submitted == 1)
    state = original.forecaster.state_dict()
    assert state["model"] is None
    fit = RecordingFit()
    restored = Driver(
        WorkloadForecaster.from_state(through_json(state), SETTINGS, InlineExecutor(), fit), workload
    )
    restored.now_s = original.now_s
    assert restored.step().reason == "new model swapped in"
    assert len(fit.calls) == 1


def test_an_unknown_state_version_is_refused():
    state = WorkloadForecaster(SETTINGS, executor=InlineExecutor()).state_dict()
    with pytest.raises(ValueError, match="state version 99"):
        WorkloadForecaster.from_state({**state, "version": 99}, SETTINGS, executor=InlineExecutor())


def test_a_saved_model_that_no_longer_unpickles_is_refitted_and_the_rest_kept():
    """A library upgrade can rename a class a pickled model refers to: only the model is lost."""
    original = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=RecordingFit()), workload)
    original.step_until(lambda f: f.model == "persistencemodel")
    state = original.forecaster.state_dict()
    gone = lzma.compress(lzma.decompress(state["model"]).replace(b"PersistenceModel", b"RenamedModelXyz!"))
    fit = RecordingFit()
    restored = Driver(
        WorkloadForecaster.from_state({**state, "model": gone}, SETTINGS, InlineExecutor(), fit), workload
    )
    restored.now_s = original.now_s
    assert restored.forecaster._iteration == original.forecaster._iteration
    assert restored.forecaster.last_forecast.to_dict() == original.forecaster.last_forecast.to_dict()
    assert restored.step().reason == "new model swapped in" and len(fit.calls) == 1
