"""The seasonal profile learned from a long history: Fourier series of absolute time, one per period.

Why a profile and not seasonal ARIMA terms: the online model keeps at most a couple of hours of data
(`forecast.max_history_s`), from which a daily or weekly season cannot be estimated, and a seasonal ARIMA
with m = one day of buckets is far too slow to fit. So the season is estimated once, from weeks of data
at a coarse resolution (least squares, milliseconds), and frozen into a function of absolute time; the
ARIMA gets its value as one exogenous column and only learns how much of it shows now (one coefficient,
identifiable from an hour of data) and the short-term dynamics around it. Absolute time keeps the profile
valid for any window the daemon later feeds the model, as in forecasting/seasonality.py.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from statsmodels.tsa.stattools import acf

from forecasting.seasonality import MIN_ACF_PEAK, detect_period_s, fourier_terms

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
CALENDAR_PERIODS_S = (DAY_S, WEEK_S)
HARMONICS = {DAY_S: (0, 1, 2, 3, 4, 6, 8, 10), WEEK_S: (0, 1, 2, 3, 4, 6)}
"""Sine/cosine pairs tried per period. Weekly harmonics stop below 7, where they would repeat the daily ones."""
OTHER_HARMONICS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class SeasonalProfile:
    """Σ over periods and harmonics of a·sin + b·cos of absolute time; the mean level is not part of it."""

    periods_s: tuple[float, ...]
    harmonics: tuple[int, ...]
    coefficients: tuple[float, ...]

    def __call__(self, times_s: np.ndarray) -> np.ndarray:
        return design(
            np.atleast_1d(np.asarray(times_s, dtype=float)), self.periods_s, self.harmonics
        ) @ np.asarray(self.coefficients)

    @property
    def amplitude(self) -> float:
        """Half the peak-to-trough swing over the longest period (for reports)."""
        period = max(self.periods_s)
        values = self(np.linspace(0.0, period, 2049)[:-1])
        return float(values.max() - values.min()) / 2

    def to_dict(self) -> dict[str, object]:
        return {"periods_s": list(self.periods_s), "harmonics": list(self.harmonics)}


def design(times_s: np.ndarray, periods_s: tuple[float, ...], harmonics: tuple[int, ...]) -> np.ndarray:
    """The Fourier columns of every period with harmonics > 0 (an empty matrix when there is none)."""
    columns = [fourier_terms(times_s, p, k) for p, k in zip(periods_s, harmonics, strict=True) if k > 0]
    return np.column_stack(columns) if columns else np.empty((len(times_s), 0))


def candidate_periods(values: np.ndarray, observed: np.ndarray, resolution_s: float) -> dict[float, float]:
    """Periods worth modelling, with their autocorrelation: the day and the week where the history shows
    at least two of them and the detrended ACF at that lag reaches MIN_ACF_PEAK; else the strongest ACF
    peak (forecasting/seasonality.py), for short histories with another rhythm."""
    values = np.asarray(values, dtype=float)
    span_s = observed.sum() * resolution_s
    positions = np.arange(values.size)
    residual = values - np.polynomial.Polynomial.fit(positions, values, deg=1)(positions)
    found: dict[float, float] = {}
    longest = max((p for p in CALENDAR_PERIODS_S if values.size * resolution_s >= 2 * p), default=None)
    if longest is not None and span_s >= 2 * DAY_S and np.std(residual) > 0:
        correlations = acf(residual, nlags=round(longest / resolution_s), adjusted=True, fft=True)
        for period in CALENDAR_PERIODS_S:
            lag = round(period / resolution_s)
            if lag < correlations.size and span_s >= 2 * period and correlations[lag] >= MIN_ACF_PEAK:
                found[period] = float(correlations[lag])
    if not found:
        period = detect_period_s(values, resolution_s)
        if period is not None:
            found[period] = float("nan")
    return found


def fit_profile(
    times_s: np.ndarray, values: np.ndarray, observed: np.ndarray, periods_s: tuple[float, ...]
) -> SeasonalProfile | None:
    """Least squares of the observed values on level + trend + Fourier terms; the harmonics per period are
    chosen by BIC. None when no period is given or BIC keeps none of them."""
    if not periods_s:
        return None
    times_s, values = np.asarray(times_s, dtype=float)[observed], np.asarray(values, dtype=float)[observed]
    scaled = (times_s - times_s.mean()) / max(np.ptp(times_s), 1.0)
    base = np.column_stack((np.ones_like(times_s), scaled))
    choices = [HARMONICS.get(p, OTHER_HARMONICS) for p in periods_s]
    best: tuple[float, tuple[int, ...], np.ndarray] | None = None
    for harmonics in itertools.product(*choices):
        terms = design(times_s, periods_s, harmonics)
        coefficients, residual_ss = _least_squares(np.column_stack((base, terms)), values)
        columns = base.shape[1] + terms.shape[1]
        bic = values.size * np.log(max(residual_ss, 1e-12) / values.size) + columns * np.log(values.size)
        if best is None or bic < best[0]:
            best = (bic, harmonics, coefficients[base.shape[1] :])
    assert best is not None
    _, harmonics, coefficients = best
    if not any(harmonics):
        return None
    kept = tuple((p, k) for p, k in zip(periods_s, harmonics, strict=True) if k > 0)
    return SeasonalProfile(
        periods_s=tuple(p for p, _ in kept),
        harmonics=tuple(k for _, k in kept),
        coefficients=tuple(float(c) for c in coefficients),
    )


def _least_squares(matrix: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, float]:
    coefficients, *_ = np.linalg.lstsq(matrix, values, rcond=None)
    residual = values - matrix @ coefficients
    return coefficients, float(residual @ residual)
