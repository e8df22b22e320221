"""The ARIMA model on buckets: fit (auto-ARIMA), bounded update, predict.

Bounded data: pmdarima's update() refits the model over all the data it holds, with the old parameters
as the start (pmdarima.arima.ARIMA.update), so its cost grows with every iteration. When an update
would take the model past `max_buckets`, `advance` does the same refit on the last `max_buckets`
instead: same order, the current parameters as start, the same iteration budget as update(). That is
what update() does anyway, on a window that no longer grows, so it costs as much as an update at the
bound, and it runs on the caller's thread like any update (no extra background task, nothing to swap).
Models that are not pmdarima ARIMAs (injected in tests) are simply updated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pmdarima as pm
from pmdarima.arima import ARIMA

from forecasting.seasonality import detect_period_s, fourier_terms

FitFunction = Callable[[np.ndarray, np.ndarray | None], object]
"""fit(y, X) -> a model with update(y, X=...) and predict(n_periods=..., X=...)."""


def fit_auto_arima(y: np.ndarray, X: np.ndarray | None = None, max_d: int = 1) -> ARIMA:
    """The default fit: stepwise auto-ARIMA, non-seasonal (seasonality arrives as Fourier terms in X).

    `max_d` caps the differencing: with d = 2 the model extrapolates the load's curvature, and a ramp
    then forecasts far above any level the workload reaches within 15 minutes. A constant series gets
    ARIMA(0,0,0) with its mean: auto_arima returns that order *without* an intercept there, which
    forecasts 0 (a rate-limited source at 40k rps was forecast at 16k and scaled in on it). For the same
    reason every undifferenced (d = 0) order is refitted with an intercept: without one the ARMA reverts
    to 0, and on level data with one dropout auto_arima's AIC picked such a model (40k rps forecast < 0).
    """
    if len(y) and np.ptp(y) == 0:
        return ARIMA(order=(0, 0, 0), with_intercept=True, suppress_warnings=True).fit(y, X=X)
    chosen = pm.auto_arima(
        y,
        X=X,
        seasonal=False,
        stepwise=True,
        max_d=max_d,
        suppress_warnings=True,
        error_action="ignore",
        n_jobs=1,
    )
    if chosen.order[1] > 0 or chosen.with_intercept:
        return chosen
    return ARIMA(**{**chosen.get_params(), "with_intercept": True}).fit(y, X=X)


@dataclass(frozen=True)
class FittedModel:
    """A fitted estimator with what is needed to build its exogenous terms."""

    estimator: object
    period_s: float | None
    fourier_order: int
    rejected_period_s: float | None = None
    """A period the history showed that the fit left out: its Fourier terms did not lower the AICc."""

    def exog(self, times_s: np.ndarray) -> np.ndarray | None:
        if self.period_s is None:
            return None
        return fourier_terms(times_s, self.period_s, self.fourier_order)

    @property
    def label(self) -> str:
        order = getattr(self.estimator, "order", None)
        name = f"arima({','.join(map(str, order))})" if order else type(self.estimator).__name__.lower()
        if self.period_s is not None:
            return f"{name}+fourier({self.period_s:g}s)"
        return (
            name if self.rejected_period_s is None else f"{name} (AICc left out {self.rejected_period_s:g}s)"
        )


def seasonal_period_s(setting: float | str | None, values: np.ndarray, resolution_s: float) -> float | None:
    """The period a fit on `values` uses: the setting's, or detected for "auto"; None under two periods."""
    if setting is None:
        return None
    if setting == "auto":
        return detect_period_s(values, resolution_s)
    return float(setting) if values.size * resolution_s >= 2 * float(setting) else None


def fit_model(
    fit: FitFunction,
    values: np.ndarray,
    times_s: np.ndarray,
    resolution_s: float,
    seasonal_setting: float | str | None,
    fourier_order: int,
) -> FittedModel:
    """Choose the seasonality and fit; meant to run off the loop's thread.

    A period that "auto" found is kept only if its Fourier terms lower the AICc of the fit, as Hyndman
    picks the number of terms (zero among them) for dynamic harmonic regression: the autocorrelation
    passes peaks near half the history that are surges or spikes seen twice by chance, and a season
    forecast from those repeats them where the load does not. A configured period is the user's word.
    """
    period_s = seasonal_period_s(seasonal_setting, values, resolution_s)
    model = FittedModel(estimator=None, period_s=period_s, fourier_order=fourier_order)
    seasonal = replace(model, estimator=fit(values, model.exog(times_s)))
    if seasonal_setting != "auto" or period_s is None:
        return seasonal
    with_season = _aicc(seasonal.estimator)
    if with_season is None:
        return seasonal
    plain = FittedModel(fit(values, None), None, fourier_order, rejected_period_s=period_s)
    without = _aicc(plain.estimator)
    return plain if without is not None and without < with_season else seasonal


def _aicc(estimator: object) -> float | None:
    """The fit's corrected Akaike criterion; None for estimators without one (injected in tests)."""
    criterion = getattr(estimator, "aicc", None)
    if not callable(criterion):
        return None
    value = float(criterion())
    return value if np.isfinite(value) else None


def advance(
    model: FittedModel, values: np.ndarray, times_s: np.ndarray, new_buckets: int, max_buckets: int
) -> FittedModel:
    """Feed the last `new_buckets` of `values` (the retained history) to the model, data kept bounded."""
    estimator = model.estimator
    if isinstance(estimator, ARIMA):
        held = len(estimator.arima_res_.data.endog)
        if held + new_buckets > max_buckets:
            window = slice(-max_buckets, None)
            budget = {"start_params": estimator.params(), "maxiter": max(5, new_buckets // 10)}
            refit = ARIMA(**{**estimator.get_params(), **budget})
            exog = model.exog(times_s[window])
            return replace(model, estimator=refit.fit(values[window], X=exog))
    new = slice(-new_buckets, None)
    estimator.update(values[new], X=model.exog(times_s[new]))
    return model


def predict(model: FittedModel, times_s: np.ndarray) -> np.ndarray:
    """Bucket values at the future bucket centres `times_s` (which must follow the model's data)."""
    values = np.asarray(model.estimator.predict(n_periods=len(times_s), X=model.exog(times_s)), dtype=float)
    if values.shape != (len(times_s),) or not np.all(np.isfinite(values)):
        raise ValueError(f"model predicted {values.shape} values, some not finite")
    return values
