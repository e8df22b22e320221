"""Forecasts that need no model: the linear trend Daedalus falls back to, and a naive hold."""

from __future__ import annotations

import numpy as np


def linear_trend_forecast(times_s: np.ndarray, rates_rps: np.ndarray, at_s: np.ndarray) -> np.ndarray:
    """Least-squares line through (times_s, rates_rps), evaluated at `at_s` and clipped at 0.

    The fallback for when the model was recently wrong: recent slope projected forward. Non-finite
    samples are ignored; with fewer than two distinct times it degrades to `naive_forecast`.
    """
    times_s = np.asarray(times_s, dtype=float)
    rates_rps = np.asarray(rates_rps, dtype=float)
    at_s = np.asarray(at_s, dtype=float)
    finite = np.isfinite(times_s) & np.isfinite(rates_rps)
    times_s, rates_rps = times_s[finite], rates_rps[finite]
    if np.unique(times_s).size < 2:
        return naive_forecast(rates_rps, len(at_s))
    # Polynomial.fit maps the times onto [-1, 1], so epoch-sized abscissae stay well conditioned.
    line = np.polynomial.Polynomial.fit(times_s, rates_rps, deg=1)
    return np.clip(line(at_s), 0.0, None)


def naive_forecast(rates_rps: np.ndarray, steps: int) -> np.ndarray:
    """The last finite rate held for `steps` values (zeros when there is none)."""
    rates_rps = np.asarray(rates_rps, dtype=float)
    finite = rates_rps[np.isfinite(rates_rps)]
    level = max(float(finite[-1]), 0.0) if finite.size else 0.0
    return np.full(steps, level)
