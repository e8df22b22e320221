"""The load of the last seconds against what the previous forecast allowed for them.

Shared by the analysis (every iteration: `Assessment.workload_recent_rps` and `expected_upper_rps`, which
the plans' surge rules read) and the surge watch between iterations (`MapeLoop.surge_seen`), so both judge a
surge the same way.
"""

from __future__ import annotations

import math

import numpy as np

from forecasting.types import Forecast
from messages.types import RECENT_S, Observation


def recent_rps(timestamps_s: np.ndarray, rates_rps: np.ndarray, now_s: float) -> tuple[float, float]:
    """Mean input rate over the last RECENT_S seconds and the newest sample among them (NaN, NaN without
    samples there)."""
    times, rates = np.asarray(timestamps_s, dtype=float), np.asarray(rates_rps, dtype=float)
    covered = (times > now_s - RECENT_S) & (times <= now_s) & np.isfinite(rates)
    if not covered.any():
        return math.nan, math.nan
    return float(rates[covered].mean()), float(rates[covered][np.argmax(times[covered])])


def observed_recent_rps(observation: Observation) -> tuple[float, float]:
    """`recent_rps` of an observation: on its short-window rate where that has samples in the last
    RECENT_S seconds, else on its input rate."""
    for rates in (observation.recent_input_rate_rps, observation.input_rate_rps):
        if rates is not None:
            recent, newest = recent_rps(observation.input_timestamps_s, rates, observation.time_s)
            if math.isfinite(recent):
                return recent, newest
    return math.nan, math.nan


def expected_upper_rps(previous: Forecast | None, now_s: float) -> float:
    """The highest rate the previous forecast's upper bound allowed over the last RECENT_S seconds (NaN
    when no previous forecast with an upper bound covers them)."""
    if previous is None or previous.upper_rps is None:
        return math.nan
    times = previous.times_s
    covered = (times > now_s - RECENT_S) & (times <= now_s)
    return float(previous.upper_rps[covered].max()) if covered.any() else math.nan


def surging(recent: float, expected_upper: float, capacity_rps: float) -> bool:
    """The load left the forecast's upper bound and exceeds the running capacity; an unknown value (NaN)
    makes no surge (the watch acts only on a forecast it has)."""
    return recent > expected_upper and recent > capacity_rps
