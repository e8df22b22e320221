"""The models the retraining produces, in the form the online forecaster uses (forecasting/arima.py).

Every registry model is a `FittedModel`: the online forecaster calls `advance` (update) and `predict` on
it exactly as on its own fits. What differs is the exogenous input, which is whatever the family needs
from absolute time:
- "arima": the seasonal profile's value (seasonal_profile.py) is the input; a pmdarima ARIMA models what is left,
  y − profile(t). The profile is an offset, not a regressor: its weight, estimated from weeks, must not
  be re-estimated on the hour of data an online update sees (tried: it drifted from 0.6 to 3.3 and the
  forecasts got worse than without a profile).
- "seasonal-naive": the value one season ago; its input is the bucket times, its state a table of the
  last season by phase, overwritten by each new observation.
- "holt-winters": additive level, trend and season (statsmodels fits the smoothing parameters); the
  recursions run here, on coarse steps aggregated from the buckets, so the model keeps learning online.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pmdarima as pm
from pmdarima.arima import ARIMA

from forecasting.arima import FittedModel, advance, fit_auto_arima
from forecasting.spark.seasonal_profile import SeasonalProfile

FAMILIES = ("arima", "seasonal-naive", "holt-winters")


@dataclass
class ProfiledArima:
    """A pmdarima ARIMA on y − profile(t); the profile's values arrive as the one column of X.

    It bounds its own data like arima.advance does for plain ARIMAs: an update that would take it past
    `max_buckets` refits the same order on the last `max_buckets` it holds (current parameters as start,
    update()'s iteration budget), so the online cost stays flat.
    """

    arima: ARIMA
    max_buckets: int

    @property
    def order(self) -> tuple[int, int, int]:
        return tuple(self.arima.order)

    @property
    def held(self) -> np.ndarray:
        return np.asarray(self.arima.arima_res_.data.endog, dtype=float).ravel()

    def update(self, y: np.ndarray, X: np.ndarray) -> None:
        residual = np.asarray(y, dtype=float) - np.asarray(X, dtype=float)[:, 0]
        if residual.size == 0:
            return
        held = self.held
        if held.size + residual.size > self.max_buckets:
            window = np.concatenate((held, residual))[-self.max_buckets :]
            self.arima = _refit(self.arima, window, maxiter=max(5, residual.size // 10))
        else:
            self.arima.update(residual)

    def predict(self, n_periods: int, X: np.ndarray) -> np.ndarray:
        offset = np.asarray(X, dtype=float)[:n_periods, 0]
        return np.asarray(self.arima.predict(n_periods=n_periods), dtype=float) + offset

    def trimmed(self, keep: int) -> ProfiledArima:
        """A copy holding only its last `keep` residuals (same order, parameters as start)."""
        held = self.held
        if held.size <= keep:
            return ProfiledArima(self.arima, self.max_buckets)
        return ProfiledArima(_refit(self.arima, held[-keep:], maxiter=10), self.max_buckets)


def _refit(arima: ARIMA, residual: np.ndarray, maxiter: int) -> ARIMA:
    budget = {"start_params": arima.params(), "maxiter": maxiter}
    return ARIMA(**{**arima.get_params(), **budget}).fit(residual)


@dataclass(frozen=True)
class RegistryModel(FittedModel):
    """A retrained model; `period_s`/`fourier_order` of the base class stay None/0 (the profile replaces them)."""

    family: str = "arima"
    profile: SeasonalProfile | None = None
    resolution_s: float = 0.0
    max_differencing: int = 1

    def exog(self, times_s: np.ndarray) -> np.ndarray:
        times_s = np.asarray(times_s, dtype=float)
        if self.family != "arima":
            return times_s[:, None]
        offset = self.profile(times_s) if self.profile is not None else np.zeros(times_s.size)
        return offset[:, None]

    @property
    def label(self) -> str:
        seasons = ",".join(f"{p:g}s" for p in self.profile.periods_s) if self.profile else ""
        if self.family == "arima":
            order = ",".join(map(str, getattr(self.estimator, "order", ())))
            return f"arima({order})" + (f"+profile({seasons})" if seasons else "")
        return f"{self.family}({getattr(self.estimator, 'period_s', 0):g}s)"

    def refit(self, values: np.ndarray, times_s: np.ndarray) -> RegistryModel:
        """The background retrain after poor forecasts: orders selected anew on the recent window, the
        long-history profile kept (the same code as the batch retraining's order selection)."""
        return fit_arima(values, times_s, self.profile, self.resolution_s, self.max_differencing, len(values))


@dataclass
class Resampled:
    """A model trained at a coarser step than the daemon's buckets (a history exported every 60 s, a
    forecaster at 10 s), fed and read at the daemon's resolution: every `factor` buckets are averaged
    into one coarse step for the model (X too: profile values or times average the same way), and each
    coarse forecast covers its `factor` buckets. Buckets of an unfinished coarse step wait in `pending`."""

    inner: object
    factor: int
    pending_y: list[float]
    pending_x: list[np.ndarray]

    @property
    def order(self) -> tuple[int, ...]:
        return getattr(self.inner, "order", ())

    @property
    def period_s(self) -> float:
        """The inner model's season (RegistryModel.label shows it)."""
        return getattr(self.inner, "period_s", 0)

    def update(self, y: np.ndarray, X: np.ndarray) -> None:
        self.pending_y.extend(np.asarray(y, dtype=float).tolist())
        self.pending_x.extend(np.asarray(X, dtype=float))
        whole = len(self.pending_y) // self.factor * self.factor
        if whole == 0:
            return
        coarse_y = np.asarray(self.pending_y[:whole]).reshape(-1, self.factor).mean(axis=1)
        coarse_x = (
            np.asarray(self.pending_x[:whole]).reshape(-1, self.factor, len(self.pending_x[0])).mean(axis=1)
        )
        del self.pending_y[:whole], self.pending_x[:whole]
        self.inner.update(coarse_y, X=coarse_x)

    def predict(self, n_periods: int, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=float)[:n_periods]
        waiting = len(self.pending_x)
        xs = np.concatenate([np.asarray(self.pending_x).reshape(-1, X.shape[1]), X]) if waiting else X
        steps = math.ceil(len(xs) / self.factor)
        padded = np.concatenate([xs, np.repeat(xs[-1:], steps * self.factor - len(xs), axis=0)])
        coarse = self.inner.predict(steps, X=padded.reshape(steps, self.factor, -1).mean(axis=1))
        return np.repeat(np.asarray(coarse, dtype=float), self.factor)[waiting : waiting + n_periods]


def resampled(model: FittedModel, resolution_s: float) -> FittedModel:
    """A registry model trained at a multiple of `resolution_s`, made to run at `resolution_s`."""
    trained_s = getattr(model, "resolution_s", resolution_s)
    factor = round(trained_s / resolution_s)
    if factor <= 1 or abs(factor * resolution_s - trained_s) > 1e-6:
        raise ValueError(
            f"the model was trained at {trained_s:g} s, not a multiple of the forecaster's {resolution_s:g} s"
        )
    return replace(model, estimator=Resampled(model.estimator, factor, [], []))


def held_buckets(model: FittedModel) -> int:
    """Buckets of data a model holds (what the forecaster's bounded update counts)."""
    estimator = model.estimator
    if isinstance(estimator, ProfiledArima):
        return estimator.held.size
    if isinstance(estimator, ARIMA):
        return len(estimator.arima_res_.data.endog)
    return 0


def install(model: FittedModel, values: np.ndarray, times_s: np.ndarray, max_buckets: int) -> FittedModel:
    """Join a registry model to the online forecaster's retained buckets (`values` at `times_s`).

    The model takes the forecaster's bound and is fed those buckets the way the forecaster feeds its
    own models (arima.advance). The gap between the end of the history and the daemon's data is bridged
    like any jump in the load: an ARIMA with d = 1 takes it as one innovation, and with d = 0 it decays.
    """
    if isinstance(model, RegistryModel) and isinstance(model.estimator, ProfiledArima):
        model = replace(
            model, estimator=replace(model.estimator.trimmed(max_buckets), max_buckets=max_buckets)
        )
    elif isinstance(model, RegistryModel) and isinstance(model.estimator, Resampled):
        inner, factor = model.estimator.inner, model.estimator.factor
        if isinstance(inner, ProfiledArima):
            coarse = max(1, max_buckets // factor)
            inner = replace(inner.trimmed(coarse), max_buckets=coarse)
        model = replace(model, estimator=Resampled(inner, factor, [], []))
    new = min(len(values), max_buckets)
    if new == 0:
        return model
    values = np.asarray(values, dtype=float)[-new:]
    return advance(model, values, np.asarray(times_s, dtype=float)[-new:], new, max_buckets)


def fit_arima(
    values: np.ndarray,
    times_s: np.ndarray,
    profile: SeasonalProfile | None,
    resolution_s: float,
    max_d: int,
    max_buckets: int,
) -> RegistryModel:
    """Order selection (stepwise auto-ARIMA, as the daemon fits) on what the profile leaves."""
    model = RegistryModel(
        estimator=None,
        period_s=None,
        fourier_order=0,
        family="arima",
        profile=profile,
        resolution_s=resolution_s,
        max_differencing=max_d,
    )
    residual = np.asarray(values, dtype=float) - model.exog(times_s)[:, 0]
    return replace(model, estimator=ProfiledArima(fit_auto_arima(residual, None, max_d), max_buckets))


def refit_arima_params(model: RegistryModel, values: np.ndarray, times_s: np.ndarray) -> RegistryModel:
    """The same order fitted anew (no search) on other data, e.g. with a profile refitted on more history."""
    arima = model.estimator.arima
    fresh = pm.ARIMA(order=arima.order, with_intercept=arima.with_intercept, suppress_warnings=True)
    residual = np.asarray(values, dtype=float) - model.exog(times_s)[:, 0]
    return replace(model, estimator=ProfiledArima(fresh.fit(residual), model.estimator.max_buckets))


@dataclass
class SeasonalNaive:
    """ŷ(t) = y(t − period): a table of the last season at the model resolution, indexed by phase."""

    period_s: float
    resolution_s: float
    table: np.ndarray

    @classmethod
    def from_history(cls, times_s: np.ndarray, values: np.ndarray, period_s: float) -> SeasonalNaive:
        resolution_s = float(times_s[1] - times_s[0])
        model = cls(period_s, resolution_s, np.full(round(period_s / resolution_s), np.nan))
        model.update(values, X=times_s[:, None])
        return model

    def _slots(self, times_s: np.ndarray) -> np.ndarray:
        return np.floor(np.mod(times_s, self.period_s) / self.resolution_s).astype(int) % self.table.size

    def update(self, y: np.ndarray, X: np.ndarray) -> None:
        values = np.asarray(y, dtype=float)
        ok = np.isfinite(values)
        self.table[self._slots(np.asarray(X, dtype=float)[:, 0])[ok]] = values[ok]

    def predict(self, n_periods: int, X: np.ndarray) -> np.ndarray:
        values = self.table[self._slots(np.asarray(X, dtype=float)[:n_periods, 0])]
        last = self.table[np.isfinite(self.table)]
        return np.where(np.isfinite(values), values, last.mean() if last.size else 0.0)


TREND_CARRY_S = 3600.0
"""The longest span over which a Holt-Winters level follows its trend, through a gap or into a forecast;
beyond, the level holds. An hour: past the default 15-minute horizon (a longer `forecast.horizon_s` sees
the forecast level off after it), and short of the days a model trained before a long gap would carry."""


@dataclass
class HoltWinters:
    """Additive Holt-Winters on steps of `step_s`; the season is indexed by the phase of absolute time.

    Recursions (Hyndman & Athanasopoulos, the form statsmodels' ExponentialSmoothing fits):
      level  = α(y − s[phase]) + (1 − α)(level + trend)
      trend  = β(level − level_prev) + (1 − β)trend
      s[phase] = γ(y − level_prev − trend_prev) + (1 − γ)s[phase]
    Buckets are averaged into steps; a step is closed when a bucket of a later step arrives, and steps
    without data only advance the level by the trend.
    """

    alpha: float
    beta: float
    gamma: float
    step_s: float
    period_s: float
    level: float
    trend: float
    season: np.ndarray  # one value per step of the period; zeros when there is no season
    last_step: int  # index (time // step_s) of the last step folded into the state
    _open_step: int | None = None
    _open_sum: float = 0.0
    _open_count: int = 0

    @property
    def _carried_steps(self) -> int:
        return max(1, math.floor(TREND_CARRY_S / self.step_s))

    def _slot(self, step: int) -> int:
        return math.floor(math.fmod(step * self.step_s, self.period_s) / self.step_s) % self.season.size

    def _fold(self, step: int, value: float | None) -> None:
        """Advance the state to `step`, with its observed mean `value` (None: no data in it)."""
        # steps without data carry the trend only, and for at most TREND_CARRY_S: a model trained 10 days
        # before the data it is joined to carried 10 days of a falling trend to -4,000 rps (load: 700)
        self.level += min(step - self.last_step - 1, self._carried_steps) * self.trend
        slot = self._slot(step)
        level_prev, trend_prev = self.level, self.trend
        if value is None:
            self.level = level_prev + trend_prev
        else:
            self.level = self.alpha * (value - self.season[slot]) + (1 - self.alpha) * (
                level_prev + trend_prev
            )
            self.trend = self.beta * (self.level - level_prev) + (1 - self.beta) * trend_prev
            if self.gamma > 0:
                self.season[slot] = (
                    self.gamma * (value - level_prev - trend_prev) + (1 - self.gamma) * self.season[slot]
                )
        self.last_step = step

    def update(self, y: np.ndarray, X: np.ndarray) -> None:
        for time_s, value in zip(np.asarray(X, dtype=float)[:, 0], np.asarray(y, dtype=float), strict=True):
            step = int(time_s // self.step_s)
            if step <= self.last_step or not math.isfinite(value):
                continue  # late, or a gap
            if self._open_step is not None and step > self._open_step:
                self._fold(self._open_step, self._open_sum / self._open_count)
                self._open_step = None
            if self._open_step is None:
                self._open_step, self._open_sum, self._open_count = step, 0.0, 0
            self._open_sum += value
            self._open_count += 1

    def predict(self, n_periods: int, X: np.ndarray) -> np.ndarray:
        times_s = np.asarray(X, dtype=float)[:n_periods, 0]
        ahead = times_s / self.step_s - (self.last_step + 0.5)  # in steps from the last closed step's centre
        phase = np.mod(times_s, self.period_s) / self.step_s - 0.5
        season = np.interp(phase, np.arange(self.season.size), self.season, period=self.season.size)
        return self.level + np.clip(ahead, 0.0, self._carried_steps) * self.trend + season


def fit_holt_winters(
    times_s: np.ndarray, values: np.ndarray, step_s: float, period_s: float | None
) -> HoltWinters:
    """Smoothing parameters from statsmodels on the (gap-filled) coarse series, then the recursions of
    `HoltWinters` run over it from statsmodels' initial states, so the state is the one the online
    updates continue from."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    slots = round(period_s / step_s) if period_s else 0
    seasonal = "add" if slots >= 2 and values.size >= 2 * slots else None
    fitted = ExponentialSmoothing(
        values,
        trend="add",
        seasonal=seasonal,
        seasonal_periods=slots if seasonal else None,
        initialization_method="heuristic" if seasonal else "estimated",
    ).fit(use_brute=False)  # the brute-force start grid: half the training time, same backtest WAPE
    params = fitted.params
    first_step = int(times_s[0] // step_s)
    season = np.zeros(max(slots, 1) if seasonal else 1)
    model = HoltWinters(
        alpha=float(params["smoothing_level"]),
        beta=float(params["smoothing_trend"]),
        gamma=float(params["smoothing_seasonal"]) if seasonal else 0.0,
        step_s=step_s,
        period_s=period_s if seasonal else step_s,
        level=float(params["initial_level"]),
        trend=float(params["initial_trend"]),
        season=season,
        last_step=first_step - 1,
    )
    if seasonal:
        # initial_seasons[i] belongs to the step i − m before the first one
        initial = np.asarray(params["initial_seasons"], dtype=float)
        for i, value in enumerate(initial):
            model.season[model._slot(first_step - slots + i)] = value
    for step, value in zip(range(first_step, first_step + values.size), values, strict=True):
        model._fold(step, float(value))
    return model
