"""Replay a per-second workload trace through the forecaster and score every forecast.

`python -m forecasting.replay TRACE.csv [--interval-s 60] [--seasonal-period-s auto]` prints the median
full-horizon WAPE per model. Fits run inline, so a replay is deterministic.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pandas as pd

from forecasting.accuracy import wape
from forecasting.arima import FitFunction
from forecasting.executor import InlineExecutor
from forecasting.online import WorkloadForecaster
from forecasting.types import ForecastSettings


@dataclass(frozen=True)
class ReplayStep:
    """One iteration: which model served and the WAPE of its forecast over the whole horizon."""

    now_s: float
    model: str
    horizon_wape: float | None


def replay(
    rates_rps: np.ndarray, settings: ForecastSettings, interval_s: int = 60, fit: FitFunction | None = None
) -> list[ReplayStep]:
    """Every interval_s, observe the last interval (seconds now-interval+1 .. now) and forecast.

    rates_rps[t] is the rate of second t. Iterations stop where the horizon would run past the trace.
    """
    rates_rps = np.asarray(rates_rps, dtype=float)
    horizon = settings.horizon_steps
    forecaster = WorkloadForecaster(settings, executor=InlineExecutor(), fit=fit)
    steps = []
    for now in range(interval_s, rates_rps.size - horizon, interval_s):
        seconds = np.arange(now - interval_s + 1, now + 1)
        forecaster.observe(seconds, rates_rps[seconds])
        forecast = forecaster.forecast(float(now))
        actual = rates_rps[now + 1 : now + 1 + horizon]
        steps.append(ReplayStep(float(now), forecast.model, wape(actual, forecast.rates_rps)))
    return steps


def median_wape_by_model(steps: list[ReplayStep]) -> dict[str, tuple[float, int]]:
    """Median horizon WAPE and number of forecasts per model family ("arima…", "linear", "naive")."""
    scores: dict[str, list[float]] = defaultdict(list)
    for step in steps:
        if step.horizon_wape is not None:
            scores[step.model.split("(")[0]].append(step.horizon_wape)
            scores["all"].append(step.horizon_wape)
    return {name: (float(np.median(values)), len(values)) for name, values in scores.items()}


def read_trace(path: str) -> np.ndarray:
    """A `second|count` trace as rates indexed by second."""
    frame = pd.read_csv(path, sep="|")
    rates = np.full(int(frame.iloc[:, 0].max()) + 1, np.nan)
    rates[frame.iloc[:, 0].to_numpy(dtype=int)] = frame.iloc[:, 1].to_numpy(dtype=float)
    return rates


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--interval-s", type=int, default=60)
    parser.add_argument("--seasonal-period-s", default=None, help='seconds, or "auto"')
    args = parser.parse_args(argv)
    period = args.seasonal_period_s
    settings = ForecastSettings(seasonal_period_s=period if period in (None, "auto") else float(period))
    for model, (median, count) in sorted(
        median_wape_by_model(replay(read_trace(args.trace), settings, args.interval_s)).items()
    ):
        print(f"{model:8s} median horizon WAPE {median:.4f} over {count} forecasts")


if __name__ == "__main__":
    main()
