"""Seasonality: finding a period in the history, and the Fourier terms that model it.

Seasonality enters ARIMA as exogenous Fourier terms (Hyndman's long-seasonality recipe) instead of a
seasonal ARIMA whose m would be hundreds of buckets. The terms are functions of absolute time, not of
the sample count as in pmdarima's FourierFeaturizer: the model's data window slides (bounded history),
models are refitted on other windows and restored after restarts, and absolute phase keeps the terms
of all of them aligned without bookkeeping.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import find_peaks
from statsmodels.tsa.stattools import acf

MIN_ACF_PEAK = 0.3  # weaker correlation at the peak is not a usable season
NOISE_SE = 3.0
"""A peak must also stand this many standard errors of a white-noise autocorrelation (1/√pairs) above 0:
at a lag near half a short history few pairs back it, and noise alone passes 0.3 there."""
MIN_PERIOD_BUCKETS = 4  # shorter "periods" are noise or the ARMA part's business


def detect_period_s(values: np.ndarray, resolution_s: float) -> float | None:
    """Period of the strongest autocorrelation peak of the detrended series, over two periods at least.

    The linear trend is removed first because a trend alone makes the ACF decay slowly and hides the
    peaks. Only lags up to half the series are searched, so a found period is seen at least twice.
    None when no peak reaches MIN_ACF_PEAK and NOISE_SE standard errors.
    """
    values = np.asarray(values, dtype=float)
    max_lag = values.size // 2
    if max_lag < MIN_PERIOD_BUCKETS or not np.all(np.isfinite(values)):
        return None
    positions = np.arange(values.size)
    trend = np.polynomial.Polynomial.fit(positions, values, deg=1)
    residual = values - trend(positions)
    if np.std(residual) <= 1e-9 * max(1.0, float(np.abs(values).mean())):
        return None  # a line or a constant; what is left is rounding noise
    # adjusted: divide by n − lag, so the (1 − lag/n) taper does not pull peaks to shorter lags.
    correlations = acf(residual, nlags=max_lag, adjusted=True, fft=True)
    # A season's ACF turns negative before it peaks again; the wiggles of a smooth series near lag 0 do not.
    negative = np.flatnonzero(correlations < 0)
    if negative.size == 0:
        return None
    peaks, properties = find_peaks(correlations, height=MIN_ACF_PEAK)
    significant = properties["peak_heights"] >= NOISE_SE / np.sqrt(values.size - peaks)
    after = (peaks > max(negative[0], MIN_PERIOD_BUCKETS)) & significant
    if not after.any():
        return None
    best = peaks[after][np.argmax(properties["peak_heights"][after])]
    return float(best) * resolution_s


def fourier_terms(times_s: np.ndarray, period_s: float, order: int) -> np.ndarray:
    """Columns sin(2πk·t/P), cos(2πk·t/P) for k = 1..order, at absolute times `times_s`."""
    # Reduce modulo the period first: epoch-sized times would lose phase precision in the product.
    phase = 2 * np.pi * np.mod(np.asarray(times_s, dtype=float), period_s) / period_s
    harmonics = phase[:, None] * np.arange(1, order + 1)[None, :]
    return np.column_stack((np.sin(harmonics), np.cos(harmonics)))
