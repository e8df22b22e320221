"""Predicted recovery time of a candidate scale-out (Daedalus §3.4), as pure per-second arithmetic.

Time runs in whole seconds from now: `forecast_rps[i]` is the rate during second i + 1. A stop of
`downtime_s` is charged as ceil(downtime_s) whole seconds — a partly-down second processes nothing and
receives all its records — so fractional downtimes err on the long side, like the paper's worst-case
replay. The downtime enters once, as the seconds before processing resumes; the catch-up is counted from
the restart, and the result is restart time + catch-up time (the authors' code added the downtime twice).
"""

from __future__ import annotations

import math

import numpy as np


def replay_records(recent_rates_rps: np.ndarray, checkpoint_interval_s: float) -> float:
    """Records a restart must reprocess, assuming the worst case: a whole checkpoint interval since the
    last completed checkpoint, at the rates of the most recent `checkpoint_interval_s` seconds.

    `recent_rates_rps` holds one rate per second, most recent last. A fractional interval takes the
    matching fraction of the oldest second. When the history is shorter than the interval or has gaps
    (NaN), the mean of the known seconds stands in for the missing ones. NaN when nothing is known.
    """
    if not math.isfinite(checkpoint_interval_s):
        return math.nan
    if checkpoint_interval_s <= 0:
        return 0.0
    rates = np.clip(np.asarray(recent_rates_rps, dtype=float).ravel(), 0.0, None)
    whole_s = math.floor(checkpoint_interval_s)
    fraction = checkpoint_interval_s - whole_s
    window = rates[-(whole_s + (fraction > 0)) :]
    known = np.isfinite(window)
    if not known.any():
        return math.nan
    if len(window) < checkpoint_interval_s or not known.all():
        return float(window[known].mean() * checkpoint_interval_s)
    weights = np.ones(len(window))
    if fraction > 0:
        weights[0] = fraction
    return float(window @ weights)


def predict_recovery_s(
    capacity_rps: float,
    forecast_rps: np.ndarray,
    backlog_records: float,
    replay_records: float,
    downtime_s: float,
) -> float:
    """Seconds from now until a restart at `capacity_rps` has worked off everything that piled up.

    Backlog at restart = replay + current backlog + the forecast arrivals of the ceil(downtime_s) down
    seconds. From the next second on, the job gains capacity − forecast(t) per second on the backlog;
    records that keep arriving during the catch-up are counted there, through the forecast. The result is
    the first whole second t ≥ ceil(downtime_s) at which the gained capacity covers the backlog (t =
    ceil(downtime_s) when nothing needs catching up). `math.inf` when that does not happen within the
    forecast, the downtime outlasts the forecast, an input is unknown (NaN, also inside the forecast
    before the catch-up ends) or the capacity is ≤ 0: such a candidate cannot promise a recovery.
    Negative forecasts count as 0 records, negative backlogs as none.
    """
    inputs = (capacity_rps, backlog_records, replay_records, downtime_s)
    if any(math.isnan(value) for value in inputs) or capacity_rps <= 0 or math.isinf(downtime_s):
        return math.inf
    forecast = np.clip(np.asarray(forecast_rps, dtype=float).ravel(), 0.0, None)
    down_s = math.ceil(max(downtime_s, 0.0))
    if down_s > len(forecast):
        return math.inf
    to_catch_up = max(replay_records, 0.0) + max(backlog_records, 0.0) + forecast[:down_s].sum()
    # gained[j] = records worked off the backlog after j seconds of processing (gained[0] = 0)
    gained = np.concatenate(([0.0], np.cumsum(capacity_rps - forecast[down_s:])))
    caught_up = np.flatnonzero(gained >= to_catch_up)
    if len(caught_up) == 0:
        return math.inf
    return float(down_s + caught_up[0])
