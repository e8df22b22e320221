"""The online workload forecaster of Daedalus §3.3: ARIMA updated every iteration, judged by WAPE.

One iteration (`forecast`): swap in a finished background fit, feed the model the buckets that became
final since the last iteration, judge the previous ARIMA forecast by its WAPE, submit a fit when one is
due, then serve the ARIMA forecast, or the linear trend when there is no model yet or the model's
previous forecast was poor.

Threading: call observe/forecast/state_dict from one thread (the loop's). Only fits run elsewhere, on
the executor, on copies of the data; their result is taken over by the loop thread in one assignment at
the first forecast() that finds the fit done, so the loop never waits for a fit and never sees a model
half-swapped. Timeouts are measured on the loop's clock (`now_s`), not the wall clock.

Model updates happen in forecast(), not observe(): observe() may run every few seconds, and each
pmdarima update() is a refit, so all buckets that became final are fed in one update per iteration.
"""

from __future__ import annotations

import contextlib
import lzma
import pickle
import traceback
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

import numpy as np
import structlog

from forecasting.accuracy import wape
from forecasting.arima import (
    FitFunction,
    FittedModel,
    advance,
    fit_auto_arima,
    fit_model,
    predict,
    seasonal_period_s,
)
from forecasting.fallback import linear_trend_forecast, naive_forecast
from forecasting.grid import BucketGrid
from forecasting.interval import BAND_S, PeakErrors
from forecasting.types import Forecast, ForecastSettings
from messages.types import MAX_RATE_RPS

log = structlog.get_logger(__name__)

STATE_VERSION = 1
SEASON_CHECK_ITERATIONS = 10
"""While the running model has no season but may get one, the history is searched again this often."""
REJECTED_TOLERANCE = 0.1
"""A period within this share of one the running model's fit rejected is the same one: no refit for it."""
REJECTED_RETRY_S = 3600.0
"""A registry version refused is tried again after this long (loop time), or at once when its content
changes: a version still being copied in, or an unreadable file share, fails only for a while."""
MODEL_COMPRESSION_PRESET = 1
"""xz preset of the saved model: a fitted ARIMA pickles to ~1.8 MB, mostly the Kalman filter's repetitive
arrays; preset 1 keeps ~110-130 KB of it in ~35 ms (zlib: ~380 KB), and the store writes it four times an
iteration (its write-ahead log and file, the snapshot's journal and file)."""
XZ_MAGIC = b"\xfd7zXZ\x00"
RATE_CAP_FACTOR = 10.0
"""No forecast above this many times the largest bucket the retained history (at least max_history_s)
holds is served, nor above MAX_RATE_RPS: a tenfold rise within one horizon beyond anything seen for
hours is no extrapolation the data support, but a model gone wrong (1e30 is finite and would size the
job at its maximum); a real surge of that size is the reactive path's and the upper bound's to catch."""
STOPPED_LOAD = "the load stopped, the previous forecast did not"


def _emit(level: str, event: str, **fields: Any) -> None:
    """Log an event; a broken logging set-up (closed stream, failing renderer) must not stop the loop."""
    with contextlib.suppress(Exception):
        getattr(log, level)(event, **fields)


class ModelSource(Protocol):
    """Models trained elsewhere (the registry of forecasting/registry.py) that the forecaster takes over."""

    poll_interval_s: float

    def newest_version(self) -> str | None:
        """The newest version's name; called on the loop's thread, so it must be cheap."""

    def fingerprint(self, version: str) -> str:
        """What tells that version's content apart (a version number is reused once its version is
        deleted); cheap, never raises."""

    def older_version(self, version: str) -> str | None:
        """The newest version before `version` (None: none); cheap, on the loop's thread."""

    def prepare(self, version: str, values: np.ndarray, times_s: np.ndarray, max_buckets: int) -> FittedModel:
        """Load that version and join it to the retained buckets; runs on the executor."""


@dataclass(frozen=True)
class _PendingFit:
    future: Future
    kind: str  # "first", "retrain", "season" or "registry"
    submitted_s: float
    end_bucket: int  # the fit saw the buckets before this one
    epoch: int
    version: str | None = None  # the registry version a "registry" fit installs
    fingerprint: str = ""  # and its content's fingerprint


class WorkloadForecaster:
    """Forecasts the input rate over the horizon, per second, from samples given to `observe`."""

    def __init__(
        self,
        settings: ForecastSettings,
        executor: Executor | None = None,
        fit: FitFunction | None = None,
        model_source: ModelSource | None = None,
    ) -> None:
        self.settings = settings
        self._owns_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="forecast-fit")
        self._fit = fit or partial(fit_auto_arima, max_d=settings.max_differencing)
        self._max_buckets = settings.buckets(settings.max_history_s)
        self._grid = self._new_grid(epoch=0)
        self._model: FittedModel | None = None
        self._fed_until = 0  # absolute index of the first bucket the model has not received
        self._pending: _PendingFit | None = None
        self._iteration = 0
        self._next_fit_iteration = 0  # after a setback, no fit is submitted before this iteration
        self._retrain_wanted = False  # a retrain was in flight when the state was saved
        self._poor_streak = 0
        self._last_model_forecast: Forecast | None = None  # the ARIMA forecast WAPE judges next time
        self._last_forecast: Forecast | None = None
        self._setback = ""  # why the last fit or model was lost, for the reason of fallback forecasts
        self._model_source = model_source
        self._model_version: str | None = None  # the registry version last swapped in
        self._model_fingerprint = ""
        self._refused: dict[str, tuple[str, float]] = {}
        """Registry versions refused (version → fingerprint, when; the last refused last, and stored): not
        retried before REJECTED_RETRY_S unless their content changes; meanwhile the newest version before
        them runs."""
        self._next_poll_s = -np.inf
        self._peak_errors = PeakErrors(
            settings.horizon_steps,
            quantile=settings.upper_quantile,
            record_interval_s=settings.loop_interval_s,
        )

    def _new_grid(self, epoch: int) -> BucketGrid:
        """An empty history; a new epoch makes a fit still running on the old one be discarded."""
        settings = self.settings
        # Enough for a fit that ends just before its timeout to catch up on what arrived meanwhile.
        retention_s = max(
            settings.max_history_s + settings.fit_timeout_s, settings.linear_window_s, settings.horizon_s
        )
        grid = BucketGrid(
            settings.resolution_s,
            max_gap_buckets=int(settings.max_interpolated_gap_s // settings.resolution_s),
            retention_buckets=settings.buckets(retention_s),
            reset_gap_buckets=self._max_buckets,
        )
        grid.epoch = epoch
        return grid

    # -- input ---------------------------------------------------------------------------------------

    def observe(self, timestamps_s: np.ndarray, rates_rps: np.ndarray, now_s: float | None = None) -> None:
        """Take input-rate samples (any step, overlaps, NaN and gaps allowed; see forecasting/grid.py).

        Cheap: it only puts samples on the bucket grid. With the loop's clock `now_s`, samples ahead of it
        are dropped (a wrong clock). Never raises, like forecast(): arrays of different lengths are
        refused, and a grid that fails (damage a restored state's checks missed) restarts the history.
        """
        if np.size(timestamps_s) != np.size(rates_rps):
            _emit("warning", "forecast_samples_refused", reason="timestamps and rates differ in length")
            return
        grid = self._grid
        epoch, future = grid.epoch, grid.future_samples
        try:
            grid.add(timestamps_s, rates_rps, now_s)
        except Exception as exc:
            _emit("error", "forecast_observe_failed", error=repr(exc), traceback=traceback.format_exc())
            self._grid = self._new_grid(epoch + 1)
            self._drop_model(f"history restarted: observe failed: {exc!r}")
            return
        if grid.future_samples > future:
            _emit(
                "warning", "forecast_samples_ahead_dropped", samples=grid.future_samples - future, now_s=now_s
            )
        if grid.epoch != epoch:
            _emit("warning", "forecast_history_restarted", reason=grid.restart_reason)
            self._drop_model(f"history restarted after {grid.restart_reason}")

    # -- one iteration -------------------------------------------------------------------------------

    def forecast(self, now_s: float) -> Forecast:
        """This iteration's forecast for seconds now_s+1 .. now_s+horizon, with its empirical upper bound
        (`forecasting/interval.py`). Never raises."""
        try:
            forecast = self._with_upper(self._iterate(now_s))
        except Exception as exc:  # a bug here must not stop the loop: hold the last level
            values, _ = self._grid.since(self._grid.first)
            forecast = Forecast(
                start_s=now_s,
                rates_rps=naive_forecast(values, self.settings.horizon_steps),
                model="naive",
                reason=f"forecaster error: {exc!r}",
                last_wape=None,
                poor_streak=self._poor_streak,
            )
            _emit("error", "forecast_failed", now_s=now_s, error=repr(exc), traceback=traceback.format_exc())
        self._last_forecast = forecast
        return forecast

    def _iterate(self, now_s: float) -> Forecast:
        self._iteration += 1
        swapped = self._take_finished_fit(now_s)
        self._feed_model()
        last_wape, poor = self._judge_previous()
        swapped = self._submit_registry_model(now_s) or swapped
        swapped = self._submit_fit_if_due(now_s) or swapped
        model_forecast, model_problem = self._model_forecast(now_s)
        self._last_model_forecast = model_forecast
        threshold = self.settings.wape_threshold
        if model_forecast is not None:
            if swapped:
                reason = "new model swapped in"
            elif poor:
                why = STOPPED_LOAD if last_wape is None else f"previous WAPE {last_wape:.3f} > {threshold:g}"
                return self._fallback(now_s, why, last_wape)
            elif last_wape is None:
                reason = "previous WAPE not assessable"
            else:
                reason = f"previous WAPE {last_wape:.3f} <= {threshold:g}"
            return Forecast(
                now_s, model_forecast.rates_rps, model_forecast.model, reason, last_wape, self._poor_streak
            )
        return self._fallback(now_s, model_problem, last_wape)

    def _with_upper(self, forecast: Forecast) -> Forecast:
        """Learn the peak errors of earlier forecasts from the load that arrived, keep this one to judge,
        and serve it with its bias taken out and its upper bound (`forecasting/interval.py`), at least
        the bound the forecast came with (`_fallback`'s before any model)."""
        grid = self._grid
        # the kept forecasts started at most a horizon and a loop ago: only their span can score them
        start = max(grid.first, grid.end - self.settings.buckets(2 * self.settings.horizon_s + 2 * BAND_S))
        values, observed = grid.since(start)
        errors = self._peak_errors
        errors.learn(grid.centres_s(start, grid.end), np.where(observed, values, np.nan))
        errors.record(forecast.start_s, forecast.rates_rps)
        raw = forecast.rates_rps
        upper = errors.upper(raw)
        if forecast.upper_rps is not None:  # a bound the forecast came with is never lowered
            upper = np.maximum(upper, forecast.upper_rps)
        central = errors.central(raw)  # its bias factor can exceed the peak quantile's: bound it too
        return replace(forecast, central_rps=central, upper_rps=np.maximum(upper, central))

    def _judge_previous(self) -> tuple[float | None, bool]:
        """WAPE of the previous ARIMA forecast on the observed buckets it covered, and whether it was poor;
        updates the streak. A load that stopped (no record in those buckets) has no WAPE, but a forecast of
        records there was poor all the same: trusted as 'not assessable', it kept the job sized for the
        load that had stopped and was never refitted."""
        previous = self._last_model_forecast
        if previous is None:
            return None, False
        times_s = previous.times_s
        grid = self._grid
        centres_s = grid.centres_s(grid.first, grid.end)
        covered = (centres_s >= times_s[0]) & (centres_s <= times_s[-1]) & grid.observed
        predicted = np.interp(centres_s[covered], times_s, previous.rates_rps)
        score = wape(grid.values[covered], predicted)
        if score is not None:
            poor = score > self.settings.wape_threshold
        elif covered.any() and not grid.values[covered].any():
            poor = bool(predicted.max() >= 1.0)  # a record a second where none came
        else:
            return None, False
        self._poor_streak = self._poor_streak + 1 if poor else 0
        return score, poor

    # -- the model -----------------------------------------------------------------------------------

    def _feed_model(self) -> None:
        """Give the model the buckets that became final since it was last fed, each exactly once."""
        grid = self._grid
        if self._model is None or grid.end <= self._fed_until:
            return
        if self._fed_until < grid.first:
            self._drop_model("the model fell behind the retained history")
            return
        try:
            self._model = self._advanced(self._model, self._fed_until)
        except Exception as exc:
            _emit("warning", "forecast_update_failed", error=repr(exc))
            self._drop_model(f"update failed: {exc!r}")
            self._back_off(f"update failed: {exc!r}")
            return
        self._fed_until = grid.end

    def _model_forecast(self, now_s: float) -> tuple[Forecast | None, str]:
        """The model's per-second forecast, or None and why there is none."""
        if self._model is None:
            return None, self._why_no_model()
        grid = self._grid
        targets_s = now_s + 1.0 + np.arange(self.settings.horizon_steps)
        steps = max(1, int(np.ceil((targets_s[-1] - grid.end * grid.resolution_s) / grid.resolution_s)) + 1)
        future_s = grid.centres_s(grid.end, grid.end + steps)
        try:
            future = predict(self._model, future_s)
            self._check_plausible(future)
        except Exception as exc:  # counted as a poor forecast: a model that stays unable is refitted
            _emit("warning", "forecast_predict_failed", error=repr(exc))
            self._poor_streak += 1
            return None, f"arima predict failed: {exc!r}"
        # Anchor on the last final bucket so the first seconds join the observed level.
        anchor_s = grid.centres_s(grid.end - 1, grid.end)
        rates = np.interp(
            targets_s, np.concatenate((anchor_s, future_s)), np.concatenate((grid.values[-1:], future))
        )
        forecast = Forecast(now_s, np.clip(rates, 0.0, None), self._model.label, "", None, self._poor_streak)
        return forecast, ""

    def _rate_cap_rps(self) -> float:
        """The highest rate a forecast may carry (see RATE_CAP_FACTOR); 1 rps counts as the least peak,
        so a history of zeros still allows a forecast of a few records."""
        values = self._grid.values
        peak_rps = max(float(values.max()) if values.size else 0.0, 1.0)
        return min(MAX_RATE_RPS, RATE_CAP_FACTOR * peak_rps)

    def _check_plausible(self, future_rps: np.ndarray) -> None:
        """Raise ValueError for a model forecast above the rate cap. One below zero is clipped, not
        refused: near a trough of ~0 that is a good forecast (refusing it cost `daily-fast` 7% more
        workers on the fallback); a model that lost the load's level is the intercept's (fit_auto_arima)."""
        cap_rps = self._rate_cap_rps()
        if future_rps.max() > cap_rps:
            raise ValueError(f"forecast {future_rps.max():.3g} rps above the cap {cap_rps:.3g} rps")

    def _why_no_model(self) -> str:
        span_s, needed_s = self._grid.span_s, self.settings.min_history_s
        if self._pending is not None:
            return f"no model yet: {self._pending.kind} fit running since {self._pending.submitted_s:g} s"
        if span_s < needed_s:
            return f"no model yet: history {span_s:.0f} s < {needed_s:.0f} s"
        return f"no model ({self._setback}); next fit attempt at iteration {self._next_fit_iteration}"

    def _drop_model(self, why: str) -> None:
        if self._model is not None:
            _emit("warning", "forecast_model_dropped", reason=why)
        self._model, self._setback = None, why
        self._model_version, self._model_fingerprint = None, ""  # the registry's may be installed again
        self._last_model_forecast = None
        self._poor_streak = 0

    def _back_off(self, why: str) -> None:
        """A fit or update went wrong: wait retrain_after_poor iterations before the next fit."""
        self._setback = why
        self._next_fit_iteration = self._iteration + self.settings.retrain_after_poor

    # -- background fits -----------------------------------------------------------------------------

    def _submit_fit_if_due(self, now_s: float) -> bool:
        """Submit the first fit or a retrain when due; True when a fit finished at once and was swapped in."""
        settings = self.settings
        if self._pending is not None or self._iteration < self._next_fit_iteration:
            return False
        if self._model is None:
            if self._grid.span_s < settings.min_history_s:
                return False
            kind = "first"
        elif self._poor_streak >= settings.retrain_after_poor or self._retrain_wanted:
            kind = "retrain"
        elif self._season_appeared():
            kind = "season"
        else:
            return False
        grid = self._grid
        values = grid.values[-self._max_buckets :].copy()
        times_s = grid.centres_s(grid.end - values.size, grid.end)
        args = (self._fit, values, times_s, settings.resolution_s, settings.seasonal_period_s)
        # a registry model retrains its own way (same profile, orders selected anew): see RegistryModel.refit
        refit = getattr(self._model, "refit", None) if kind == "retrain" else None
        try:
            if refit is not None:
                future = self._executor.submit(refit, values, times_s)
            else:
                future = self._executor.submit(fit_model, *args, settings.fourier_order)
        except Exception as exc:
            _emit("error", "forecast_fit_not_submitted", kind=kind, error=repr(exc))
            self._back_off(f"{kind} fit not submitted: {exc!r}")
            return False
        self._pending = _PendingFit(future, kind, now_s, grid.end, grid.epoch)
        _emit(
            "info",
            "forecast_fit_submitted",
            kind=kind,
            now_s=now_s,
            buckets=values.size,
            poor_streak=self._poor_streak,
        )
        return self._take_finished_fit(now_s)

    def _season_appeared(self) -> bool:
        """Whether a fit on today's history would take a period (the one configured, or one 'auto' finds)
        that the running model lacks.

        The first fit looks at `min_history_s` of history, too little to see a period twice; without this
        check a season is taken only if the model later fails for long enough to be retrained."""
        model = self._model
        if model is None or model.period_s is not None:
            return False
        if getattr(model, "refit", None) is not None:
            return False  # a registry model brings its own profile
        if self._iteration % SEASON_CHECK_ITERATIONS:
            return False
        values = self._grid.values[-self._max_buckets :]
        settings = self.settings
        period_s = seasonal_period_s(settings.seasonal_period_s, values, settings.resolution_s)
        rejected_s = model.rejected_period_s
        return period_s is not None and not (
            rejected_s and abs(period_s / rejected_s - 1) <= REJECTED_TOLERANCE
        )

    def _take_finished_fit(self, now_s: float) -> bool:
        """Swap in a finished fit (True), abandon one past its timeout, log one that failed."""
        pending = self._pending
        if pending is None:
            return False
        if not pending.future.done():
            if now_s < pending.submitted_s:  # the clock stepped back: its timeout counts from now
                self._pending = replace(pending, submitted_s=now_s)
            elif now_s - pending.submitted_s > self.settings.fit_timeout_s:
                if not pending.future.cancel() and self._owns_executor:
                    self._replace_executor()
                self._pending = None
                _emit(
                    "warning",
                    "forecast_fit_abandoned",
                    kind=pending.kind,
                    submitted_s=pending.submitted_s,
                    now_s=now_s,
                    timeout_s=self.settings.fit_timeout_s,
                )
                self._back_off(f"{pending.kind} fit abandoned after {self.settings.fit_timeout_s:g} s")
            return False
        self._pending = None
        try:
            model = pending.future.result()
        except Exception as exc:
            if pending.version is not None:  # a damaged or unsuitable registry model: keep what runs
                self._reject(pending, now_s)
                _emit("error", "forecast_registry_model_rejected", version=pending.version, error=repr(exc))
                return False
            _emit("error", "forecast_fit_failed", kind=pending.kind, error=repr(exc))
            self._back_off(f"{pending.kind} fit failed: {exc!r}")
            return False
        if pending.epoch != self._grid.epoch:
            _emit("warning", "forecast_fit_discarded", kind=pending.kind, reason="history restarted since")
            return False
        try:  # fed the buckets that arrived while it was fitting, it must forecast before it replaces anything
            model = self._caught_up(model, pending.end_bucket)
        except Exception as exc:
            _emit(
                "error", "forecast_model_refused", kind=pending.kind, version=pending.version, error=repr(exc)
            )
            if pending.version is not None:
                self._reject(pending, now_s)
            else:
                self._back_off(f"{pending.kind} fit unusable: {exc!r}")
            return False
        self._model, self._fed_until = model, self._grid.end
        self._poor_streak, self._last_model_forecast, self._retrain_wanted = 0, None, False
        if pending.version is not None:
            self._model_version, self._model_fingerprint = pending.version, pending.fingerprint
        _emit(
            "info",
            "forecast_model_swapped",
            kind=pending.kind,
            model=model.label,
            now_s=now_s,
            version=pending.version,
        )
        return True

    def _caught_up(self, model: FittedModel, fed_until: int) -> FittedModel:
        """`model` fed the buckets from `fed_until` on; raises unless it then forecasts the horizon in
        finite, plausible values (a registry version with a NaN level, or a fit gone wrong, would otherwise
        replace a working model and fail at every iteration after)."""
        grid = self._grid
        if fed_until < grid.first:
            raise ValueError("the fit fell behind the retained history")
        if grid.end > fed_until:
            model = self._advanced(model, fed_until)
        horizon_buckets = self.settings.buckets(self.settings.horizon_s)
        self._check_plausible(predict(model, grid.centres_s(grid.end, grid.end + horizon_buckets + 1)))
        return model

    def _advanced(self, model: FittedModel, fed_until: int) -> FittedModel:
        """`model` fed the final buckets from `fed_until` (within the retained history) to the grid's end."""
        grid = self._grid
        values, _ = grid.since(grid.first)
        times_s = grid.centres_s(grid.first, grid.end)
        return advance(model, values, times_s, grid.end - fed_until, self._max_buckets)

    def _submit_registry_model(self, now_s: float) -> bool:
        """Every poll interval, install a newer registry version in the background (True: swapped in at once).

        Only the version listing runs on the loop's thread; loading and joining the model to the retained
        buckets (see ModelSource.prepare) run on the executor like a fit, and the model is swapped in
        between iterations by _take_finished_fit. Waits for data: a model is joined to the buckets seen.
        """
        source = self._model_source
        if source is not None and self._next_poll_s - now_s > source.poll_interval_s:
            self._next_poll_s = now_s  # the clock stepped back: a day's step skipped a day of polls
        if (
            source is None
            or self._pending is not None
            or now_s < self._next_poll_s
            or not self._grid.values.size
        ):
            return False
        self._next_poll_s = now_s + source.poll_interval_s
        try:
            version, fingerprint = self._wanted_version(source, now_s)
        except Exception as exc:
            _emit("warning", "forecast_registry_unreadable", error=repr(exc))
            return False
        if version is None or (version, fingerprint) == (self._model_version, self._model_fingerprint):
            return False
        grid = self._grid
        values, times_s = grid.values.copy(), grid.centres_s(grid.first, grid.end)
        try:
            future = self._executor.submit(source.prepare, version, values, times_s, self._max_buckets)
        except Exception as exc:
            _emit("error", "forecast_fit_not_submitted", kind="registry", error=repr(exc))
            return False
        self._pending = _PendingFit(future, "registry", now_s, grid.end, grid.epoch, version, fingerprint)
        _emit("info", "forecast_registry_model_found", version=version, now_s=now_s)
        return self._take_finished_fit(now_s)

    def _wanted_version(self, source: ModelSource, now_s: float) -> tuple[str | None, str]:
        """The newest version not refused within REJECTED_RETRY_S, or the one running (None: neither): a
        newest version made for another resolution must not leave a fresh daemon without the older one."""
        version = source.newest_version()
        while version is not None:
            fingerprint = source.fingerprint(version)
            running = (version, fingerprint) == (self._model_version, self._model_fingerprint)
            if running or not self._refused_recently(version, fingerprint, now_s):
                return version, fingerprint
            version = source.older_version(version)
        return None, ""

    def _refused_recently(self, version: str, fingerprint: str, now_s: float) -> bool:
        refused = self._refused.get(version)
        # a changed content is tried at once, and a clock stepped back retries it
        return (
            refused is not None and refused[0] == fingerprint and 0 <= now_s - refused[1] < REJECTED_RETRY_S
        )

    def _reject(self, pending: _PendingFit, now_s: float) -> None:
        self._refused.pop(pending.version, None)  # the last refused last
        self._refused[pending.version] = (pending.fingerprint, now_s)
        self._next_poll_s = now_s  # the next iteration tries the version before it

    @property
    def _rejected(self) -> tuple[str, str, float] | None:
        """The version refused last (version, fingerprint, when): what the state keeps of the refusals."""
        if not self._refused:
            return None
        version = next(reversed(self._refused))
        return (version, *self._refused[version])

    @property
    def model_version(self) -> str | None:
        """The registry version last swapped in (None: none so far)."""
        return self._model_version

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to timeout_s for a pending fit to finish (for tests and shutdown); True when none runs."""
        pending = self._pending
        return pending is None or bool(wait([pending.future], timeout=timeout_s).done)

    def _replace_executor(self) -> None:
        """A fit still running past its timeout keeps the one fit thread: every later fit would queue behind
        it and be abandoned in turn, never started. The next ones get a thread of their own; the hung one
        ends, or not, on its own (a thread cannot be stopped)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forecast-fit")

    def close(self) -> None:
        """Stop the executor this forecaster created (an injected executor is the caller's to stop)."""
        if self._owns_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- fallback ------------------------------------------------------------------------------------

    def _fallback(self, now_s: float, reason: str, last_wape: float | None) -> Forecast:
        """The linear trend over the last linear_window_s of observed buckets (naive under two).

        Before any model it comes with an upper bound at that window's peak: a load that just fell
        extrapolates to zero, and the empirical bound, a multiple of the forecast, would follow it down.
        Until a model has seen the load, the plan must not assume it stays below what the window carried."""
        grid = self._grid
        start = max(grid.first, grid.end - self.settings.buckets(self.settings.linear_window_s))
        values, observed = grid.since(start)
        times_s = grid.centres_s(start, grid.end)[observed]
        targets_s = now_s + 1.0 + np.arange(self.settings.horizon_steps)
        if observed.sum() >= 2:
            rates, model = linear_trend_forecast(times_s, values[observed], targets_s), "linear"
        else:
            rates, model = naive_forecast(values, len(targets_s)), "naive"
        rates = np.minimum(rates, self._rate_cap_rps())  # a steep trend extrapolates beyond any load seen
        upper = None
        if self._model is None and observed.any():
            upper = np.full(len(rates), values[observed].max())
        return Forecast(now_s, rates, model, reason, last_wape, self._poor_streak, upper_rps=upper)

    # -- persistence ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a restarted daemon needs; JSON-serialisable except `model` (pickled bytes or None).

        A fit in flight is not saved: the restored forecaster submits it again at its first iteration.
        """
        return {
            "version": STATE_VERSION,
            "grid": self._grid.state_dict(),
            "model": None if self._model is None else _packed_model(self._model),
            "fed_until": self._fed_until,
            "iteration": self._iteration,
            "next_fit_iteration": self._next_fit_iteration,
            "fit_in_flight": self._pending is not None or self._retrain_wanted,
            "poor_streak": self._poor_streak,
            "setback": self._setback,
            "model_version": self._model_version,
            "model_fingerprint": self._model_fingerprint,
            "rejected": None if self._rejected is None else list(self._rejected),
            "last_model_forecast": None
            if self._last_model_forecast is None
            else self._last_model_forecast.to_dict(),
            "last_forecast": None if self._last_forecast is None else self._last_forecast.to_dict(),
            "peak_errors": self._peak_errors.state_dict(),
        }

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        settings: ForecastSettings,
        executor: Executor | None = None,
        fit: FitFunction | None = None,
        model_source: ModelSource | None = None,
    ) -> WorkloadForecaster:
        """A forecaster that continues where the one that produced `state` stopped (trusted input only)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown forecaster state version {state.get('version')!r}")
        forecaster = cls(settings, executor=executor, fit=fit, model_source=model_source)
        try:
            forecaster._grid.load_state(state["grid"])
        except Exception as exc:  # another resolution, or damage: the model without its history is lost too
            _emit("warning", "forecast_state_not_restored", error=repr(exc)[:300])
            forecaster._restore_judgement_alone(state)  # it does not need the history
            return forecaster
        try:  # a model pickled by another version of a library may no longer load: refit, keep the rest
            model = None if state["model"] is None else _unpacked_model(state["model"])
            if model is not None and not isinstance(model, FittedModel):
                raise TypeError(f"a {type(model).__name__}, not a model")
        except Exception as exc:
            _emit("warning", "forecast_model_not_restored", error=repr(exc)[:300])
            model, state = None, {**state, "next_fit_iteration": state["iteration"], "fit_in_flight": False}
            state["setback"] = f"the saved model did not load: {exc!r}"[:300]
        forecaster._model = model
        forecaster._fed_until = int(state["fed_until"])
        forecaster._iteration = int(state["iteration"])
        # never later than a back-off from now: 10^12 stored kept every fit away for good
        forecaster._next_fit_iteration = min(
            int(state["next_fit_iteration"]), forecaster._iteration + settings.retrain_after_poor
        )
        if state["fit_in_flight"]:
            forecaster._next_fit_iteration = forecaster._iteration
            forecaster._retrain_wanted = forecaster._model is not None
        # a streak below 0 stored (-10^6) kept every poor forecast from ever asking for a refit
        forecaster._poor_streak = min(max(int(state["poor_streak"]), 0), settings.retrain_after_poor)
        forecaster._setback = str(state["setback"])
        if forecaster._model is not None:
            forecaster._model_version = state.get("model_version")
            forecaster._model_fingerprint = str(state.get("model_fingerprint") or "")
        forecaster._restore_judgement_alone(state)
        for name in ("last_model_forecast", "last_forecast"):
            if state[name] is not None:
                try:  # only judged and compared with, never planned on: a damaged one is dropped alone
                    setattr(forecaster, f"_{name}", Forecast.from_dict(state[name]))
                except (KeyError, TypeError, ValueError) as exc:
                    _emit("warning", "forecast_not_restored", forecast=name, error=repr(exc)[:300])
        return forecaster

    def _restore_judgement_alone(self, state: dict[str, Any]) -> None:
        """The peak errors per lead minute (the upper bound; damaged entries skipped) and the registry
        version refused last (a damaged one dropped with one line, not the model and history beside it)."""
        try:
            rejected = state.get("rejected")
            if rejected is not None:
                self._refused = {str(rejected[0]): (str(rejected[1]), float(rejected[2]))}
        except (TypeError, ValueError, IndexError) as exc:
            _emit("warning", "forecast_judgement_not_restored", part="rejected", error=repr(exc)[:300])
        self._peak_errors.load_state(state.get("peak_errors", {}))

    @property
    def last_forecast(self) -> Forecast | None:
        return self._last_forecast


def _packed_model(model: FittedModel) -> bytes:
    """The model as the knowledge store keeps it: pickled, then xz-compressed."""
    return lzma.compress(
        pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL), preset=MODEL_COMPRESSION_PRESET
    )


def _unpacked_model(blob: bytes) -> object:
    """A saved model (trusted input only); a store written before compression holds the bare pickle."""
    return pickle.loads(lzma.decompress(blob) if blob.startswith(XZ_MAGIC) else blob)
