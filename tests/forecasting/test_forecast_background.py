"""Fits run off the loop: the loop never waits, and failures or hangs leave a working forecaster."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest
from structlog.testing import capture_logs

from forecasting.executor import InlineExecutor
from forecasting.online import WorkloadForecaster
from forecasting.types import ForecastSettings
from tests.forecasting.fakes import BlockingFit, ConstantModel, Driver, PersistenceModel, RecordingFit

SETTINGS = ForecastSettings(
    resolution_s=10.0, horizon_s=300.0, min_history_s=300.0, max_history_s=1200.0, linear_window_s=120.0
)
WAIT_S = 30.0  # generous bound for waits on events; a healthy run takes milliseconds


def flat(level: float):
    return lambda t: np.full(t.shape, level)


def bad_then_good(y, call):
    """The first model is always 100% off (forces a retrain); the retrained one tracks the data."""
    return ConstantModel(y, level=0.0) if call == 1 else PersistenceModel(y)


def test_a_blocked_retrain_never_blocks_forecast_and_is_swapped_in_after_release():
    fit = BlockingFit(make=bad_then_good, block_from=2)
    forecaster = WorkloadForecaster(replace(SETTINGS, fit_timeout_s=3600.0), fit=fit)  # a real thread pool
    driver = Driver(forecaster, lambda t: 1000 + 0.1 * t)
    try:
        driver.step_until(lambda f: len(fit.calls) == 1)  # the first fit was submitted (and is not blocked)
        assert forecaster.wait_idle(WAIT_S)
        driver.step_until(lambda f: fit.started.is_set())  # 15 poor iterations later, the retrain blocks
        while_blocked = [driver.step() for _ in range(5)]
        assert not fit.finished.is_set()  # all five returned while the retrain was still blocked
        assert not forecaster.wait_idle(0.01)
        assert [f.model for f in while_blocked] == ["linear"] * 5  # the old model's forecasts are poor
        streak = while_blocked[0].poor_streak
        assert streak > 15
        assert [f.poor_streak for f in while_blocked] == list(range(streak, streak + 5))
        fit.release()
        assert forecaster.wait_idle(WAIT_S)
        swapped = driver.step()
        assert (swapped.model, swapped.reason, swapped.poor_streak) == (
            "persistencemodel",
            "new model swapped in",
            0,
        )
        assert len(fit.calls) == 2
        retrained = fit.models[-1]
        assert (
            retrained.update_sizes[0] >= 5 * 6
        )  # caught up on the buckets that arrived while it was blocked
        last_bucket_mean = 1000 + 0.1 * (driver.now_s - 5.5)  # the bucket [now-10, now) is the last final one
        assert retrained.received[-1] == pytest.approx(last_bucket_mean)
        assert swapped.rates_rps[0] == pytest.approx(last_bucket_mean)
    finally:
        fit.release()
        forecaster.close()


def failing_once(y, call):
    if call == 1:
        raise RuntimeError("no convergence")
    return PersistenceModel(y)


def test_a_failing_fit_leaves_the_fallback_and_is_retried_later():
    fit = RecordingFit(make=failing_once)
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=fit), flat(900.0))
    with capture_logs() as logs:
        forecasts = [driver.step() for _ in range(25)]
    failed_at = next(i for i, f in enumerate(forecasts) if "fit failed" in f.reason)
    assert forecasts[failed_at].model == "linear"
    assert forecasts[failed_at].reason == (
        f"no model (first fit failed: RuntimeError('no convergence')); next fit attempt at iteration {failed_at + 16}"
    )
    assert any(e["event"] == "forecast_fit_failed" and e["log_level"] == "error" for e in logs)
    assert len(fit.calls) == 2
    assert (
        forecasts[failed_at + 15].reason == "new model swapped in"
    )  # retried after retrain_after_poor iterations
    assert all(f.model == "linear" for f in forecasts[failed_at : failed_at + 15])


class UpdateFails(PersistenceModel):
    def update(self, y, X=None):
        raise np.linalg.LinAlgError("singular")


class PredictFails(PersistenceModel):
    def predict(self, n_periods, X=None):
        raise ValueError("bad exog")


def test_a_failing_update_drops_the_model_and_the_loop_carries_on():
    fit = RecordingFit(make=lambda y, call: UpdateFails(y) if call == 1 else PersistenceModel(y))
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=fit), flat(900.0))
    driver.step_until(lambda f: f.model == "updatefails")
    after = driver.step()
    assert after.model == "linear"
    assert after.reason.startswith("no model (update failed: LinAlgError('singular'))")
    later = [driver.step() for _ in range(15)]
    assert later[-1].model == "persistencemodel"
    assert len(fit.calls) == 2


def test_a_fit_that_cannot_forecast_is_refused_and_fitted_again_after_the_back_off():
    fit = RecordingFit(make=lambda y, call: PredictFails(y) if call == 1 else PersistenceModel(y))
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=fit), flat(900.0))
    with capture_logs() as logs:
        forecasts = [driver.step() for _ in range(25)]
    refused_at = next(i for i, f in enumerate(forecasts) if "unusable" in f.reason)
    assert forecasts[refused_at].model == "linear"
    assert forecasts[refused_at].reason.startswith("no model (first fit unusable: ValueError('bad exog'))")
    assert any(e["event"] == "forecast_model_refused" for e in logs)
    assert forecasts[refused_at + 15].reason == "new model swapped in" and len(fit.calls) == 2


class PredictFailsLater(PersistenceModel):
    """Forecasts twice (the check before it is swapped in, one iteration), then fails every time (a state
    gone NaN)."""

    predictions = 0

    def predict(self, n_periods, X=None):
        self.predictions += 1
        if self.predictions > 2:
            raise ValueError("bad state")
        return super().predict(n_periods, X)


def test_a_model_that_stops_forecasting_counts_as_poor_and_is_refitted():
    fit = RecordingFit(make=lambda y, call: PredictFailsLater(y) if call == 1 else PersistenceModel(y))
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=fit), flat(900.0))
    forecasts = [driver.step() for _ in range(40)]
    failing = [f for f in forecasts if f.reason.startswith("arima predict failed")]
    assert failing and all(f.model == "linear" for f in failing)
    assert [f.poor_streak for f in failing[:3]] == [1, 2, 3]
    assert len(fit.calls) == 2 and forecasts[-1].model == "persistencemodel"


def _first_fit_blocked() -> tuple[BlockingFit, WorkloadForecaster, Driver]:
    """A forecaster on its own fit thread whose first fit blocks until released; fits time out at 120 s."""
    fit = BlockingFit(block_from=1)
    forecaster = WorkloadForecaster(replace(SETTINGS, fit_timeout_s=120.0), fit=fit)
    return fit, forecaster, Driver(forecaster, flat(900.0))


def test_a_fit_past_its_timeout_is_abandoned_and_its_late_result_ignored():
    fit, forecaster, driver = _first_fit_blocked()
    try:
        driver.step_until(lambda f: f.reason.startswith("no model yet: first fit running since"))
        submitted_s = driver.now_s
        assert fit.started.wait(WAIT_S)
        with capture_logs() as logs:
            while driver.now_s + 60 - submitted_s <= 120:
                assert driver.step().reason == f"no model yet: first fit running since {submitted_s} s"
            abandoned = driver.step()  # more than 120 s of loop time later
        assert abandoned.reason.startswith("no model (first fit abandoned after 120 s)")
        assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["forecast_fit_abandoned"]
        fit.release()
        assert fit.finished.wait(WAIT_S)
        forecaster.wait_idle(WAIT_S)
        assert driver.step().model == "linear"  # the abandoned result is not swapped in
    finally:
        fit.release()
        forecaster.close()


def test_a_fit_returning_garbage_does_not_break_forecast():
    fit = RecordingFit(make=lambda y, call: object())
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=fit), flat(900.0))
    forecasts = [driver.step() for _ in range(8)]
    assert all(f.rates_rps.shape == (300,) for f in forecasts)
    assert forecasts[-1].model == "linear"


def test_inline_executor_runs_at_once_and_keeps_exceptions_in_the_future():
    executor = InlineExecutor()
    assert executor.submit(lambda a, b: a + b, 2, b=3).result(timeout=0) == 5

    def boom():
        raise KeyError("x")

    future = executor.submit(boom)
    assert future.done()
    assert isinstance(future.exception(timeout=0), KeyError)


def test_an_unexpected_error_gives_a_naive_forecast_with_the_traceback_logged(monkeypatch):
    forecaster = WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=RecordingFit())
    driver = Driver(forecaster, flat(900.0))
    driver.step()
    monkeypatch.setattr(forecaster, "_judge_previous", lambda: 1 / 0)
    with capture_logs() as logs:
        forecast = driver.step()
    assert (forecast.model, forecast.reason) == (
        "naive",
        "forecaster error: ZeroDivisionError('division by zero')",
    )
    np.testing.assert_array_equal(forecast.rates_rps, np.full(300, 900.0))
    assert "ZeroDivisionError" in next(e for e in logs if e["event"] == "forecast_failed")["traceback"]


class BrokenLogger:
    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise TypeError("renderer cannot render this event")

        return fail


def test_a_broken_logging_setup_changes_nothing(monkeypatch):
    """Another component may leave structlog writing to a closed stream; the forecaster must not care."""
    monkeypatch.setattr("forecasting.online.log", BrokenLogger())
    fit = RecordingFit(make=failing_once)
    driver = Driver(WorkloadForecaster(SETTINGS, executor=InlineExecutor(), fit=fit), flat(900.0))
    forecasts = [driver.step() for _ in range(25)]  # fit failure, retry, swap: all of them log
    assert forecasts[-1].model == "persistencemodel"
    driver.now_s += 1500  # a history restart logs from observe()
    assert driver.step().reason.startswith("no model yet: history")


def test_a_fit_hung_past_its_timeout_leaves_the_next_fit_a_thread_of_its_own():
    """A fit that never returns held the forecaster's one fit thread: every later fit queued behind it and
    was abandoned in turn without starting, and the forecaster never had a model again."""
    hang, calls = threading.Event(), 0

    def first_hangs(y, X=None):
        nonlocal calls
        calls += 1
        if calls == 1:
            hang.wait(4 * WAIT_S)
        return PersistenceModel(y)

    forecaster = WorkloadForecaster(replace(SETTINGS, fit_timeout_s=120.0), fit=first_hangs)
    driver = Driver(forecaster, flat(900.0))
    try:
        driver.step_until(lambda f: f.reason.startswith("no model (first fit abandoned"))
        driver.step_until(lambda f: "fit running" in f.reason or f.model == "persistencemodel")
        assert forecaster.wait_idle(WAIT_S) and not hang.is_set()  # ran while the first still hangs
        assert driver.step_until(lambda f: f.model == "persistencemodel", max_steps=2) and calls == 2
    finally:
        hang.set()
        forecaster.close()


def test_a_clock_stepped_back_restarts_a_running_fits_timeout_from_now():
    """Counted from a submission time ahead of the clock, a hung fit was never abandoned."""
    fit, forecaster, driver = _first_fit_blocked()
    try:
        driver.step_until(lambda f: f.reason.startswith("no model yet: first fit running since"))
        driver.now_s -= 86_400
        stepped_back_s = driver.now_s + 60
        running = driver.step()
        assert running.reason == f"no model yet: first fit running since {stepped_back_s} s"
        while driver.now_s + 60 - stepped_back_s <= 120:
            driver.step()
        with capture_logs() as logs:
            driver.step()
        assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["forecast_fit_abandoned"]
    finally:
        fit.release()
        forecaster.close()


def stops_at_900(t: np.ndarray) -> np.ndarray:
    return np.where(t < 900, 800.0, 0.0)


def test_a_model_forecasting_records_after_the_load_stopped_is_poor_and_refitted():
    """With no record in the buckets judged, WAPE has nothing to weigh by; a model that kept forecasting the
    old level was served as 'not assessable' for as long as the load stayed stopped, and never refitted."""
    fit = RecordingFit(make=lambda y, call: ConstantModel(y, 800.0) if call == 1 else PersistenceModel(y))
    driver = Driver(WorkloadForecaster(SETTINGS, InlineExecutor(), fit=fit), stops_at_900)
    driver.step_until(lambda f: f.model == "constantmodel")
    while driver.now_s < 960:
        driver.step()
    stopped = driver.step()
    assert stopped.reason == "the load stopped, the previous forecast did not" and stopped.model == "linear"
    refitted = driver.step_until(lambda f: f.reason == "new model swapped in")
    assert refitted.rates_rps.max() == 0.0 and len(fit.calls) == 2
