"""Predicted recovery time of a candidate scale-out (Daedalus §3.4), as pure per-second arithmetic.

Time runs in whole seconds from now: `forecast_rps[i]` is the rate during second i + 1. A stop of
`downtime_s` is charged as ceil(downtime_s) whole seconds — a partly-down second processes nothing and
receives all its records — so fractional downtimes err on the long side, like the paper's worst-case
replay. The downtime enters once, as the seconds before processing resumes; the catch-up is counted from
the restart, and the result is restart time + catch-up time (the authors' code added the downtime twice).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

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


def predict_recoveries_s(
    capacities_rps: np.ndarray,
    forecast_rps: np.ndarray,
    backlog_records: float,
    replay_records: float,
    downtime_s: float,
    allowed_records: float = 0.0,
) -> np.ndarray:
    """`predict_recovery_s` of many candidate capacities at once (one per element), with the same result:
    the catch-up sums are the same sequential cumulative sums, one row per capacity.

    `allowed_records`: recovered once no more than this still waits (Daedalus: 0, nothing waits)."""
    capacities = np.asarray(capacities_rps, dtype=float).ravel()
    recoveries = np.full(len(capacities), math.inf)
    inputs = (backlog_records, replay_records, downtime_s)
    if any(math.isnan(value) for value in inputs) or math.isinf(downtime_s):
        return recoveries
    forecast = np.clip(np.asarray(forecast_rps, dtype=float).ravel(), 0.0, None)
    down_s = math.ceil(max(downtime_s, 0.0))
    if down_s > len(forecast):
        return recoveries
    to_catch_up = max(replay_records, 0.0) + max(backlog_records, 0.0) + forecast[:down_s].sum()
    to_catch_up -= max(allowed_records, 0.0)
    usable = capacities > 0  # NaN and ≤ 0 cannot promise a recovery
    if to_catch_up <= 0.0:  # nothing to catch up: processing resumes caught up
        recoveries[usable] = float(down_s)
        return recoveries
    rest = forecast[down_s:]
    if np.isfinite(rest).any():  # a capacity at or below every forecast second never gains
        usable &= capacities > np.nanmin(rest)
    else:
        usable[:] = False
    # The running sums of capacity − forecast, one row per candidate, in blocks of seconds: the sum carries
    # over from one block to the next as the same sequential additions, and a row stops at its catch-up.
    active, carried = np.flatnonzero(usable), np.zeros(int(usable.sum()))
    start, width = 0, _FIRST_BLOCK_S
    while len(active) and start < len(rest):
        gained = capacities[active, None] - rest[None, start : start + width]
        gained[:, 0] += carried
        np.cumsum(gained, axis=1, out=gained)
        caught_up = gained >= to_catch_up
        done = caught_up.any(axis=1)
        recoveries[active[done]] = down_s + 1 + start + caught_up[done].argmax(axis=1)
        active, carried = active[~done], gained[~done, -1]
        start, width = start + width, 4 * width
    return recoveries


def predict_lag_catch_ups_s(
    capacities_rps: np.ndarray,
    forecast_rps: np.ndarray,
    backlog_records: float,
    replay_records: float,
    downtime_s: float,
    lag_slo_s: float,
) -> np.ndarray:
    """Seconds from the restart's resume until the job's lag is back within `lag_slo_s`, per capacity.

    A restart leaves the replay, the backlog and the down seconds' arrivals waiting: a lag of the downtime
    plus the replay's age, beyond the SLO when the downtime alone nearly reaches it (a reactive-mode
    restart takes ~30 s). The lag is within the SLO again once what waits is no more than `lag_slo_s`
    seconds of the input rate right after the resume (the forecast's mean over those seconds). With a
    steady rate that takes the excess × ρ / (1 − ρ), ρ the utilization after the resume (the excess itself
    was spent over the SLO while down: excess / (1 − ρ) in all), so it is what a restart at high
    utilization costs. 0 when the lag never leaves the SLO; `math.inf` when it does not come back within
    the forecast (or an input is unknown)."""
    unknown = np.full(len(np.atleast_1d(capacities_rps)), math.inf)
    if not math.isfinite(downtime_s):
        return unknown
    down_s = math.ceil(max(downtime_s, 0.0))
    forecast = np.clip(np.asarray(forecast_rps, dtype=float).ravel(), 0.0, None)
    after = forecast[down_s : down_s + max(math.ceil(lag_slo_s), 1)]
    if not len(after) or not np.isfinite(after).all():
        return unknown
    allowed = lag_slo_s * float(after.mean())
    return (
        predict_recoveries_s(capacities_rps, forecast, backlog_records, replay_records, downtime_s, allowed)
        - down_s
    )


def predict_restarts(
    capacities_rps: Mapping[int, float],
    forecast_rps: np.ndarray,
    backlog_records: float,
    replay_records: float,
    downtime_s: float,
    lag_slo_s: float | None,
) -> tuple[dict[int, float], dict[int, float]]:
    """Per scale-out of `capacities_rps`, a restart there: its predicted recovery (s) and, with a lag SLO,
    the seconds its lag stays over the SLO after the resume (empty without one)."""
    scaleouts = list(capacities_rps)
    capacities = np.array([capacities_rps[n] for n in scaleouts], dtype=float)
    inputs = (capacities, forecast_rps, backlog_records, replay_records, downtime_s)
    recovery = dict(zip(scaleouts, predict_recoveries_s(*inputs).tolist(), strict=True))
    if lag_slo_s is None:
        return recovery, {}
    return recovery, dict(zip(scaleouts, predict_lag_catch_ups_s(*inputs, lag_slo_s).tolist(), strict=True))


_FIRST_BLOCK_S = 64
"""Seconds of the first block of running sums; later blocks grow fourfold (most candidates that recover
at all do so early)."""
