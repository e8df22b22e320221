"""The forecaster's settings and the immutable forecast it hands to the loop."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ForecastSettings:
    """Knobs of the workload forecaster; every duration is in seconds.

    resolution_s: the model works on buckets of this size (1-s ARIMA is slow and noisy); forecasts are
        interpolated back to one value per second.
    horizon_s: how far ahead each forecast reaches (Daedalus: 15 minutes).
    min_history_s: the first ARIMA fit waits for this much history; the linear fallback serves before.
    max_history_s: the most history a fit or the model's data cover, because pmdarima's update() refits
        over all the data it holds and would otherwise slow down every iteration. A gap in the data longer
        than this restarts the history (and drops the model): what came before no longer describes the present.
    wape_threshold: a previous ARIMA forecast with a WAPE above this is not trusted for one iteration.
    retrain_after_poor: that many consecutive poor iterations retrain the model in the background; it is
        also the number of iterations a failed or abandoned fit waits before the next attempt.
    linear_window_s: the linear fallback fits its trend on the observed buckets of this last span.
    seasonal_period_s: None (no seasonality), a period in seconds, or "auto" (the ACF peak of the fit's
        history, kept only where its Fourier terms lower the fit's AICc); seasonal terms enter a fit only
        when its history covers at least two periods.
    fit_timeout_s: a background fit pending longer than this (loop time) is abandoned, the old model kept.
    max_interpolated_gap_s: gaps up to this long are interpolated linearly; longer ones hold the last value.
        Both kinds are marked as not observed, so neither WAPE nor the fallback's trend uses them.
    fourier_order: sine/cosine pairs per seasonal period (exogenous Fourier terms, not a seasonal ARIMA).
    max_differencing: the largest d auto-ARIMA may choose (d = 2 extrapolates curvature: see arima.py).
    upper_quantile: the quantile of recent peak errors the upper bound is set at (forecasting/interval.py).
    loop_interval_s: how often the loop asks for a forecast (not a forecast setting of the config: the
        loop's), so that the upper bound keeps a whole horizon of forecasts to judge.
    """

    resolution_s: float = 10.0
    horizon_s: float = 900.0
    min_history_s: float = 1800.0
    max_history_s: float = 7200.0
    wape_threshold: float = 0.25
    retrain_after_poor: int = 15
    linear_window_s: float = 600.0
    seasonal_period_s: float | str | None = None
    fit_timeout_s: float = 300.0
    max_interpolated_gap_s: float = 120.0
    fourier_order: int = 2
    max_differencing: int = 1
    upper_quantile: float = 0.9
    loop_interval_s: float = 60.0

    def __post_init__(self) -> None:
        positive = (
            "resolution_s",
            "horizon_s",
            "max_history_s",
            "wape_threshold",
            "linear_window_s",
            "loop_interval_s",
        )
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not 0 <= self.min_history_s <= self.max_history_s:
            raise ValueError("min_history_s must be within 0..max_history_s")
        if self.retrain_after_poor < 1 or self.fourier_order < 1:
            raise ValueError("retrain_after_poor and fourier_order must be >= 1")
        if self.fit_timeout_s <= 0 or self.max_interpolated_gap_s < 0:
            raise ValueError("fit_timeout_s must be > 0 and max_interpolated_gap_s >= 0")
        period = self.seasonal_period_s
        if not (period is None or period == "auto" or (isinstance(period, int | float) and period > 0)):
            raise ValueError(f"seasonal_period_s must be None, 'auto' or > 0, got {period!r}")

    @property
    def horizon_steps(self) -> int:
        """Number of per-second values in a forecast."""
        return math.ceil(self.horizon_s)

    def buckets(self, span_s: float) -> int:
        """Number of whole buckets in `span_s` (at least one)."""
        return max(1, math.ceil(span_s / self.resolution_s - 1e-9))


@dataclass(frozen=True)
class Forecast:
    """One iteration's forecast: per-second rates for seconds start_s+1 .. start_s+horizon.

    last_wape is the WAPE of the previous ARIMA forecast (also computed when the fallback was served,
    so that the poor streak measures the model rather than the fallback); None when not assessable.
    """

    start_s: float
    rates_rps: np.ndarray
    model: str
    reason: str
    last_wape: float | None
    poor_streak: int
    central_rps: np.ndarray | None = None
    """The forecast with its recent bias per lead minute taken out: what the plan sizes for (None when
    the forecaster serves none; `planned_rps` then falls back to the forecast)."""
    upper_rps: np.ndarray | None = None
    """Per second, how high the load may go: the forecast raised by its recent peak errors (None before
    the forecaster has judged any; before any model, at least the fallback window's peak)."""

    @property
    def planned_rps(self) -> np.ndarray:
        return self.rates_rps if self.central_rps is None else self.central_rps

    def __post_init__(self) -> None:
        for name in ("rates_rps", "central_rps", "upper_rps"):
            if getattr(self, name) is not None:
                rates = np.array(getattr(self, name), dtype=float)
                rates.setflags(write=False)
                object.__setattr__(self, name, rates)

    @property
    def times_s(self) -> np.ndarray:
        """The second each rate belongs to."""
        return self.start_s + 1.0 + np.arange(len(self.rates_rps))

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable form (for the knowledge store)."""
        return {
            "start_s": self.start_s,
            "rates_rps": self.rates_rps.tolist(),
            "model": self.model,
            "reason": self.reason,
            "last_wape": self.last_wape,
            "poor_streak": self.poor_streak,
            "central_rps": None if self.central_rps is None else self.central_rps.tolist(),
            "upper_rps": None if self.upper_rps is None else self.upper_rps.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Forecast:
        """A stored forecast; ValueError unless its rates are what a forecaster serves: one finite rate ≥ 0
        per second (an upper bound shorter than its rates failed every analysis after a restart)."""
        rates = _rates(data["rates_rps"], None)
        start_s = float(data["start_s"])
        if not math.isfinite(start_s):
            raise ValueError(f"a forecast starting at {start_s}")
        return cls(
            start_s=start_s,
            rates_rps=rates,
            model=str(data["model"]),
            reason=str(data["reason"]),
            last_wape=None if data["last_wape"] is None else float(data["last_wape"]),
            poor_streak=int(data["poor_streak"]),
            central_rps=None if data.get("central_rps") is None else _rates(data["central_rps"], len(rates)),
            upper_rps=None if data.get("upper_rps") is None else _rates(data["upper_rps"], len(rates)),
        )


def _rates(values: object, length: int | None) -> np.ndarray:
    rates = np.asarray(values, dtype=float)
    if rates.ndim != 1 or not len(rates) or (length is not None and len(rates) != length):
        raise ValueError(f"{rates.shape} rates where {length or 'some'} were saved")
    if not (np.isfinite(rates).all() and (rates >= 0).all()):
        raise ValueError("rates that are no finite rate ≥ 0")
    return rates
