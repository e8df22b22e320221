"""Forecast accuracy: WAPE, the measure Daedalus uses to decide whether to trust the model."""

from __future__ import annotations

import numpy as np


def wape(actual: np.ndarray, forecast: np.ndarray) -> float | None:
    """Σ|y − ŷ| / Σy over the pairs where both are finite.

    WAPE weights errors by volume, so quiet periods do not dominate as they would a mean of
    percentage errors. None when no pair is finite or Σy is not positive (nothing to weigh by).
    """
    actual = np.asarray(actual, dtype=float)
    forecast = np.asarray(forecast, dtype=float)
    if actual.shape != forecast.shape:
        raise ValueError(f"shapes differ: actual {actual.shape}, forecast {forecast.shape}")
    both = np.isfinite(actual) & np.isfinite(forecast)
    total = float(actual[both].sum())
    if not both.any() or total <= 0:
        return None
    return float(np.abs(actual[both] - forecast[both]).sum() / total)
