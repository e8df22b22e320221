"""Retraining one job's forecaster on its long history (what each Spark task runs; plain pandas/numpy).

Steps: clean and resample the history to the model resolution (and to a coarse one for the seasons),
mark gaps and outages, detect the seasonal periods, fit the seasonal profile and select the ARIMA orders
on the history minus its last days, backtest every candidate on rolling origins in those days at the
forecast horizon, keep the best, and rebuild it on the whole history.

Two resolutions, because weeks of data at the daemon's resolution (10 s: 240,000 points for 4 weeks)
are far beyond what ARIMA can fit:
- `season_resolution_s` (5 min): the profile's least squares and Holt-Winters see the whole history.
- `resolution_s`, the online forecaster's: ARIMA orders are selected on the last `select_window_s` at this
  resolution with the profile as exogenous column, and the artifact holds at most half the daemon's
  `max_history_s` there, so the daemon continues it with its own update()s (see models.trim).
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from forecasting.accuracy import wape
from forecasting.grid import bucket_means, fill_gaps, runs
from forecasting.history import MAX_HISTORY_SPAN_S
from forecasting.spark.models import (
    HoltWinters,
    RegistryModel,
    SeasonalNaive,
    fit_arima,
    fit_holt_winters,
    refit_arima_params,
)
from forecasting.spark.seasonal_profile import DAY_S, candidate_periods, fit_profile
from messages.types import MAX_RATE_RPS


@dataclass(frozen=True)
class RetrainSettings:
    """Knobs of the retraining; the first five must match the daemon's `forecast` config section."""

    resolution_s: float = 10.0
    horizon_s: float = 900.0
    max_history_s: float = 7200.0
    max_interpolated_gap_s: float = 120.0
    max_differencing: int = 1
    season_resolution_s: float = 300.0
    select_window_s: float = 3 * 3600.0
    """History (at resolution_s, at most 1,500 buckets, at least two of the daemon's history bound) the
    ARIMA orders are selected on. The daemon refits them on its 2-hour bound, so a longer window does not
    choose better orders: 24 h at 1-minute buckets took 4.8 times as long with a mean backtest WAPE of
    0.0433 against 0.0411 over six synthetic 4-week jobs."""
    backtest_s: float = 2 * DAY_S
    """The last span of the history held out for the backtest (at most a quarter of the history)."""
    backtest_origins: int = 48
    min_history_s: float = 6 * 3600.0
    """Observed data a job needs (gaps do not count: 20 samples 8 h apart are not 8 h of history)."""
    max_backtest_wape: float = 1.0
    """A best backtest WAPE above this publishes nothing (the registry's version stays in use): a forecast
    of zero scores 1.0, so a model above it is worse than no forecast (one row at 5e8 rps in 8 h of
    ~1,000 scored 347). Not the daemon's per-forecast poor threshold (0.25): a backtest pooled over
    bursty days can be above that and still beat the hour the daemon would fit on."""
    outage_min_s: float = 600.0
    """A run of zero rates this long, in a series that is otherwise positive, is an outage (job down)."""

    def buckets(self, span_s: float) -> int:
        return max(1, math.ceil(span_s / self.resolution_s - 1e-9))

    @property
    def horizon_buckets(self) -> int:
        return self.buckets(self.horizon_s)

    @property
    def online_buckets(self) -> int:
        """The daemon's bound on the data a model holds (forecast.max_history_s in buckets)."""
        return self.buckets(self.max_history_s)


@dataclass(frozen=True)
class Series:
    """A history on a regular grid: bucket centres, gap-filled values, and which buckets were observed."""

    times_s: np.ndarray
    values: np.ndarray
    observed: np.ndarray
    resolution_s: float
    gaps: int = 0
    outages: int = 0

    def __len__(self) -> int:
        return self.values.size

    def before(self, time_s: float) -> Series:
        """The buckets that end by `time_s`."""
        keep = self.times_s + self.resolution_s / 2 <= time_s + 1e-6
        return replace(
            self, times_s=self.times_s[keep], values=self.values[keep], observed=self.observed[keep]
        )


@dataclass
class TrainResult:
    """The outcome for one job: status "ok" (model and metadata), "skipped" (too little data) or "failed"."""

    job: str
    status: str
    reason: str = ""
    model: RegistryModel | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


OUTLIER_FACTOR = 100.0
"""A rate this many times above the 99.9th percentile is damage, not load (a catch-up after an outage
runs at a few times the usual rate)."""


def clean(times_s: np.ndarray, rates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Plausible samples sorted by time; of duplicated timestamps the last one wins. Dropped, as the daemon's
    grid drops them: rates that are not finite, below 0 or above MAX_RATE_RPS (damage, not load: one at
    1e12 won the model selection), rates more than OUTLIER_FACTOR times all but the top 0.1 % of rates
    (one row at 5e8 rps in 8 h of ~1,000 made the published model forecast 3.5e5), and times more than
    MAX_HISTORY_SPAN_S from the median time (one row stamped 1970 in a week's history made the dense grid
    1.3 GB)."""
    frame = pd.DataFrame({"t": np.asarray(times_s, dtype=float), "r": np.asarray(rates, dtype=float)})
    frame = frame[np.isfinite(frame.t) & np.isfinite(frame.r) & (frame.r >= 0) & (frame.r <= MAX_RATE_RPS)]
    top = frame.r.quantile(0.999, interpolation="lower") if len(frame) else 0.0  # the outlier not included
    if top > 0:
        frame = frame[frame.r <= OUTLIER_FACTOR * top]
    if len(frame):
        frame = frame[(frame.t - frame.t.median()).abs() <= MAX_HISTORY_SPAN_S]
    frame = frame.drop_duplicates("t", keep="last").sort_values("t", kind="stable")
    return frame.t.to_numpy(), frame.r.to_numpy()


def regularise(
    times_s: np.ndarray, rates: np.ndarray, resolution_s: float, max_gap_s: float, outage_min_s: float
) -> Series:
    """Bucket means on the grid of `resolution_s`; gaps filled as the online grid does (forecasting/grid.py:
    short ones interpolated, long ones hold the last value) and marked unobserved. Outages (long runs of
    zeros in a series that is otherwise positive) are treated as gaps: they show the job down, not demand."""
    buckets, means = bucket_means(times_s, rates, resolution_s)
    dense = np.full(int(buckets[-1] - buckets[0]) + 1, np.nan)
    dense[buckets - buckets[0]] = means
    gaps = _runs(np.isnan(dense), 1)
    outages = _runs(dense == 0, max(1, math.ceil(outage_min_s / resolution_s)))
    if outages and np.nanmedian(dense) > 0:
        for start, stop in outages:
            dense[start:stop] = np.nan
    else:
        outages = []
    finite = np.flatnonzero(np.isfinite(dense))
    dense = dense[finite[0] : finite[-1] + 1]
    first = int(buckets[0]) + int(finite[0])
    filled, observed = fill_gaps(dense, int(max_gap_s // resolution_s))
    times = (np.arange(first, first + dense.size) + 0.5) * resolution_s
    return Series(times, filled, observed, resolution_s, len(gaps), len(outages))


def _runs(mask: np.ndarray, min_length: int) -> list[tuple[int, int]]:
    return [(a, b) for a, b in runs(mask) if b - a >= min_length]


def train_job(job: str, times_s: np.ndarray, rates: np.ndarray, settings: RetrainSettings) -> TrainResult:
    """The whole retraining of one job; never raises (a failure is a result with its reason)."""
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # statsmodels/pmdarima convergence chatter, per fit
            result = _train(job, times_s, rates, settings)
    except Exception as exc:  # the first line: pmdarima's messages go on with a link
        first = (str(exc).strip().splitlines() or [""])[0]
        result = TrainResult(job, "failed", f"{type(exc).__name__}: {first}")
    result.metadata.setdefault("job", job)
    result.metadata["train_seconds"] = round(time.perf_counter() - started, 3)
    return result


def _train(job: str, times_s: np.ndarray, rates: np.ndarray, settings: RetrainSettings) -> TrainResult:
    rows = len(times_s)
    times_s, rates = clean(times_s, rates)
    if times_s.size < 3:
        return TrainResult(
            job, "skipped", f"only {times_s.size} valid samples of {rows} rows (bad time or rate: dropped)"
        )
    if np.median(times_s) > EPOCH_MS_ABOVE:
        return TrainResult(
            job,
            "skipped",
            f"timestamps look like epoch milliseconds (median {np.median(times_s):.4g}): give epoch seconds",
        )
    step_s = float(np.median(np.diff(times_s)))
    daemon_resolution_s = settings.resolution_s
    settings = replace(settings, resolution_s=training_resolution_s(step_s, settings))
    if settings.resolution_s > settings.horizon_s:
        return TrainResult(
            job,
            "skipped",
            f"history step {step_s:g} s is coarser than the forecast horizon {settings.horizon_s:g} s "
            f"(export the history at a step <= {daemon_resolution_s:g} s, forecast.resolution_s)",
        )
    gap_s, outage_s = settings.max_interpolated_gap_s, settings.outage_min_s
    fine = regularise(times_s, rates, settings.resolution_s, gap_s, outage_s)
    span_s = len(fine) * settings.resolution_s
    observed_s = int(fine.observed.sum()) * settings.resolution_s
    if observed_s < settings.min_history_s:
        return TrainResult(
            job,
            "skipped",
            f"history covers {observed_s:.0f} s of observed data (in a span of {span_s:.0f} s) "
            f"< {settings.min_history_s:.0f} s",
        )
    if span_s / 4 < settings.horizon_s:  # the backtest holds out at most a quarter
        return TrainResult(
            job,
            "skipped",
            f"history covers {span_s:.0f} s: the backtest needs a quarter of it to hold a forecast "
            f"horizon ({settings.horizon_s:g} s), so at least {4 * settings.horizon_s:.0f} s",
        )
    coarse_s = max(settings.season_resolution_s, settings.resolution_s)
    coarse = regularise(times_s, rates, coarse_s, max(gap_s, coarse_s), outage_s)

    backtest_s = min(settings.backtest_s, span_s / 4)
    split_s = math.floor((fine.times_s[-1] + settings.resolution_s / 2 - backtest_s) / coarse_s) * coarse_s
    train_fine, train_coarse = fine.before(split_s), coarse.before(split_s)
    origins = _origins(len(train_fine), len(fine), settings)
    scored_buckets = _observed_in_horizons(fine, origins, settings.horizon_buckets)
    if scored_buckets < settings.horizon_buckets:
        return TrainResult(
            job,
            "skipped",
            f"the backtest span holds {scored_buckets} observed buckets, less than a forecast horizon "
            f"({settings.horizon_buckets}): the history ends in a gap",
        )
    periods = candidate_periods(train_coarse.values, train_coarse.observed, coarse_s)
    profile = fit_profile(train_coarse.times_s, train_coarse.values, train_coarse.observed, tuple(periods))
    season_s = max(profile.periods_s) if profile else None

    window = _select_window(train_fine, settings)
    candidates: dict[str, Any] = {
        "arima": fit_arima(
            window.values,
            window.times_s,
            profile,
            settings.resolution_s,
            settings.max_differencing,
            settings.online_buckets,
        ),
        "holt-winters": fit_holt_winters(train_coarse.times_s, train_coarse.values, coarse_s, season_s),
    }
    if season_s is not None:
        candidates["seasonal-naive"] = SeasonalNaive.from_history(
            train_fine.times_s, train_fine.values, season_s
        )
    scores = {name: _backtest(name, model, fine, origins, settings) for name, model in candidates.items()}
    if "seasonal-naive" not in scores:
        scores["seasonal-naive"] = None  # no season: not applicable
    scored = {name: value for name, value in scores.items() if value is not None}
    if not scored:
        return TrainResult(job, "failed", "no candidate could be scored in the backtest")
    best = min(scored, key=lambda name: (scored[name], name != "arima"))
    if scored[best] > settings.max_backtest_wape:
        return TrainResult(
            job,
            "skipped",
            f"best backtest WAPE {scored[best]:.3g} ({best}) is above {settings.max_backtest_wape:g}: "
            "no better than a forecast of zero (damaged rates in the history?); nothing published",
        )

    final_profile = (
        fit_profile(coarse.times_s, coarse.values, coarse.observed, profile.periods_s) if profile else None
    )
    model = _final_model(best, candidates[best], fine, final_profile, settings, train_fine.times_s[-1])
    metadata = _metadata(job, model, settings, coarse_s, periods, final_profile, scores, best, origins)
    metadata["daemon_resolution_s"] = daemon_resolution_s  # the daemon resamples when they differ
    metadata["training_range"] = _training_range(times_s, step_s, fine)
    metadata["training_range"]["rows_dropped"] = rows - int(times_s.size)  # bad time/rate, duplicates
    if origins:
        last = min(origins[-1] + settings.horizon_buckets, len(fine)) - 1
        metadata["backtest"].update(start=_iso(fine.times_s[origins[0]]), end=_iso(fine.times_s[last]))
    return TrainResult(job, "ok", "", model, metadata)


EPOCH_MS_ABOVE = 1e11
"""Epoch seconds stay below this until the year 5138; epoch milliseconds are above it since 1973."""


def _observed_in_horizons(series: Series, origins: list[int], horizon: int) -> int:
    """Observed buckets the backtest scores: its WAPE on one of them would say nothing."""
    scored = np.zeros(len(series), dtype=bool)
    for origin in origins:
        scored[origin : origin + horizon] = True
    return int((scored & series.observed).sum())


def training_resolution_s(step_s: float, settings: RetrainSettings) -> float:
    """The daemon's resolution, or for a coarser history (the usual 60 s Prometheus export against 10 s
    buckets) the smallest multiple of it that the history's step fills, so the daemon can resample."""
    if step_s <= 1.5 * settings.resolution_s:
        return settings.resolution_s
    return math.ceil(step_s / settings.resolution_s - 0.25) * settings.resolution_s


def _metadata(
    job: str,
    model: RegistryModel,
    settings: RetrainSettings,
    coarse_s: float,
    periods: dict[float, float],
    profile: Any,
    scores: dict[str, float | None],
    best: str,
    origins: list[int],
) -> dict[str, Any]:
    """What metadata.json says about the model: family and orders, resolutions, seasons, the backtest."""
    return {
        "job": job,
        "model": _describe_model(model),
        "resolution_s": settings.resolution_s,
        "horizon_s": settings.horizon_s,
        "season_resolution_s": coarse_s,
        "seasonality": {
            "detected_periods_s": {
                f"{p:g}": (None if math.isnan(c) else round(c, 4)) for p, c in periods.items()
            },
            "profile": profile.to_dict() if profile else None,
            "profile_amplitude_rps": round(profile.amplitude, 3) if profile else None,
        },
        "backtest": {
            "horizon_s": settings.horizon_s,
            "origins": len(origins),
            "wape": {name: (None if value is None else round(value, 5)) for name, value in scores.items()},
            "best": best,
        },
    }


def _training_range(times_s: np.ndarray, step_s: float, fine: Series) -> dict[str, Any]:
    return {
        "start": _iso(times_s[0]),
        "end": _iso(times_s[-1]),
        "samples": int(times_s.size),
        "history_step_s": step_s,
        "buckets": len(fine),
        "observed_share": round(float(fine.observed.mean()), 4),
        "gaps": fine.gaps,
        "outages": fine.outages,
    }


def _select_window(series: Series, settings: RetrainSettings) -> Series:
    """The last select_window_s (at most 1,500 buckets: auto-ARIMA's cost), and at least two windows of
    the daemon's history bound, so the orders suit the amount of data they will be updated on."""
    size = min(settings.buckets(settings.select_window_s), 1500, len(series))
    size = max(size, min(len(series), 2 * settings.online_buckets))
    return replace(
        series, times_s=series.times_s[-size:], values=series.values[-size:], observed=series.observed[-size:]
    )


def _origins(first: int, end: int, settings: RetrainSettings) -> list[int]:
    """Evenly spread forecast origins (index of the first forecast bucket) in the held-out span."""
    last = end - settings.horizon_buckets
    if last < first:
        return []
    return sorted({round(i) for i in np.linspace(first, last, settings.backtest_origins)})


def _backtest(
    name: str, model: Any, series: Series, origins: list[int], settings: RetrainSettings
) -> float | None:
    """Pooled WAPE over the origins' horizons, on observed buckets only.

    ARIMA keeps its parameters and filters the window of the daemon's history bound before each origin
    (what its online refits start from); Holt-Winters and seasonal-naive are updated online with every
    bucket up to the origin, as the daemon would.
    """
    horizon = settings.horizon_buckets
    actual, forecast = [], []
    online = copy.deepcopy(model) if name != "arima" else None
    fed = origins[0] if origins else 0  # the online models' state ends where the first horizon starts
    for origin in origins:
        future = slice(origin, origin + horizon)
        if name == "arima":
            predicted = _arima_from_origin(model, series, origin, horizon, settings.online_buckets)
        else:
            online.update(series.values[fed:origin], X=series.times_s[fed:origin, None])
            fed = origin
            predicted = online.predict(horizon, X=series.times_s[future, None])
        observed = series.observed[future]
        actual.append(np.where(observed, series.values[future], np.nan))
        forecast.append(np.asarray(predicted, dtype=float)[: observed.size])
    if not actual:
        return None
    return wape(np.concatenate(actual), np.concatenate(forecast))


def _arima_from_origin(
    model: RegistryModel, series: Series, origin: int, horizon: int, window: int
) -> np.ndarray:
    past = slice(max(0, origin - window), origin)
    future = slice(origin, origin + horizon)
    residual = series.values[past] - model.exog(series.times_s[past])[:, 0]
    results = model.estimator.arima.arima_res_.apply(residual)
    return np.asarray(results.forecast(horizon)) + model.exog(series.times_s[future])[:, 0]


def _final_model(
    best: str,
    candidate: Any,
    fine: Series,
    profile: Any,
    settings: RetrainSettings,
    trained_until_s: float,
) -> RegistryModel:
    """The winner rebuilt on the whole history, holding at most the daemon's history bound."""
    base = RegistryModel(
        estimator=None,
        period_s=None,
        fourier_order=0,
        family=best,
        profile=profile,
        resolution_s=settings.resolution_s,
        max_differencing=settings.max_differencing,
    )
    if best == "arima":
        window = _select_window(fine, settings)
        refitted = refit_arima_params(replace(candidate, profile=profile), window.values, window.times_s)
        return replace(refitted, estimator=refitted.estimator.trimmed(settings.online_buckets))
    model = copy.deepcopy(candidate)
    later = fine.times_s > trained_until_s if isinstance(model, HoltWinters) else slice(None)
    model.update(fine.values[later], X=fine.times_s[later, None])
    return replace(base, estimator=model)


def _describe_model(model: RegistryModel) -> dict[str, Any]:
    description: dict[str, Any] = {"family": model.family, "label": model.label}
    estimator = model.estimator
    if model.family == "arima":
        arima = estimator.arima
        description.update(
            order=list(arima.order),
            with_intercept=bool(arima.with_intercept),
            params={
                name: float(value) for name, value in zip(_param_names(arima), arima.params(), strict=False)
            },
            held_buckets=int(estimator.held.size),
        )
    elif isinstance(estimator, HoltWinters):
        description.update(
            alpha=estimator.alpha, beta=estimator.beta, gamma=estimator.gamma, step_s=estimator.step_s
        )
    if isinstance(estimator, SeasonalNaive | HoltWinters):
        description["period_s"] = estimator.period_s
    return description


def _param_names(estimator: Any) -> list[str]:
    try:
        return list(estimator.arima_res_.param_names)
    except AttributeError:
        return [f"p{i}" for i in range(len(estimator.params()))]


def _iso(time_s: float) -> str:
    return pd.Timestamp(float(time_s), unit="s", tz="UTC").isoformat()
