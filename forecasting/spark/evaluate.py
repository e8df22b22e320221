"""Does retraining on the long history pay? The registry model against a model fitted on the last hour.

`python -m forecasting.spark.evaluate [--weeks 4] [--seed 7] [--spark] [--json]` generates `weeks` + 1
weeks of synthetic 1-minute workload (daily and weekly seasonality, trend, noise, spikes, gaps), retrains
on the first `weeks` (through the Spark job with --spark, else the same per-job code in-process), and
then runs two online forecasters over the following week, as the daemon would (observe, forecast every
`interval_s`, fits inline so the run is deterministic):
- "registry": starts from the registry's model, updated online;
- "last-hour": the daemon without a registry, fitted on the last hour of the history only (and
  refitted on its last hour after poor forecasts, as the daemon does).
Both see the same data and serve their forecasts with the same fallback rules; the score is the WAPE
of every served 15-minute forecast against the samples that then arrived, pooled over the week.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd
import structlog

from forecasting.executor import InlineExecutor
from forecasting.online import ModelSource, WorkloadForecaster
from forecasting.registry import ModelRegistry, RegistrySource, serialize
from forecasting.spark.train import RetrainSettings, train_job
from forecasting.synthetic import WEEK_S, WorkloadShape, generate
from forecasting.types import ForecastSettings

HOUR_S = 3600.0


@dataclass(frozen=True)
class Score:
    wape: float
    median_wape: float
    forecasts: int
    models: dict[str, int]


def following_period_wape(
    history: pd.DataFrame,
    following: pd.DataFrame,
    settings: ForecastSettings,
    interval_s: float,
    model_source: ModelSource | None = None,
) -> Score:
    """Run a forecaster over `following` (columns timestamp, rate) after it saw the last max_history_s of
    `history`; pooled and median WAPE of its forecasts over the observed samples of each horizon."""
    forecaster = WorkloadForecaster(settings, InlineExecutor(), model_source=model_source)
    start_s = float(following.timestamp.iloc[0])
    seen = history[history.timestamp >= start_s - settings.max_history_s]
    forecaster.observe(seen.timestamp.to_numpy(), seen.rate.to_numpy())
    times, rates = following.timestamp.to_numpy(), following.rate.to_numpy()
    errors, totals, per_forecast, models = 0.0, 0.0, [], Counter()
    last_s = times[-1] - settings.horizon_s
    fed = 0
    for now_s in np.arange(start_s - 1.0, last_s, interval_s):
        upto = int(np.searchsorted(times, now_s, side="right"))
        forecaster.observe(times[fed:upto], rates[fed:upto])
        fed = upto
        forecast = forecaster.forecast(float(now_s))
        ahead = (times > now_s) & (times <= now_s + settings.horizon_s)
        predicted = forecast.rates_rps[np.round(times[ahead] - now_s).astype(int) - 1]
        actual = rates[ahead]
        if actual.sum() <= 0:
            continue
        errors += float(np.abs(actual - predicted).sum())
        totals += float(actual.sum())
        per_forecast.append(float(np.abs(actual - predicted).sum() / actual.sum()))
        models[forecast.model.split("(")[0]] += 1
    forecaster.close()
    return Score(errors / totals, float(np.median(per_forecast)), len(per_forecast), dict(models))


def compare(weeks: int = 4, seed: int = 7, spark: bool = False, interval_s: float = 900.0) -> dict:
    """The registry model and the last-hour model on the week after a `weeks`-week history."""
    frame = generate(WorkloadShape(), seed, (weeks + 1) * WEEK_S, step_s=60.0)
    split_s = float(frame.timestamp.iloc[0]) + weeks * WEEK_S
    history, following = frame[frame.timestamp < split_s], frame[frame.timestamp >= split_s]
    online = ForecastSettings(resolution_s=60.0, min_history_s=HOUR_S, max_history_s=HOUR_S)
    retrain = RetrainSettings(
        resolution_s=online.resolution_s,
        horizon_s=online.horizon_s,
        max_history_s=online.max_history_s,
        max_interpolated_gap_s=online.max_interpolated_gap_s,
        max_differencing=online.max_differencing,
    )
    with tempfile.TemporaryDirectory() as registry_dir:
        if spark:
            metadata = _retrain_on_spark(history, registry_dir, retrain)
        else:
            result = train_job("job", history.timestamp.to_numpy(), history.rate.to_numpy(), retrain)
            if result.status != "ok":
                raise RuntimeError(f"retraining failed: {result.reason}")
            metadata = (
                ModelRegistry(registry_dir)
                .publish("job", serialize(result.model), result.metadata)
                .metadata()
            )
        source = RegistrySource(registry_dir, "job", online.resolution_s)
        registry = following_period_wape(history, following, online, interval_s, source)
    last_hour = following_period_wape(history, following, online, interval_s)
    return {
        "history_weeks": weeks,
        "seed": seed,
        "interval_s": interval_s,
        "registry_model": metadata["model"]["label"],
        "backtest_wape": metadata["backtest"]["wape"],
        "registry": registry.__dict__,
        "last_hour": last_hour.__dict__,
    }


def _retrain_on_spark(history: pd.DataFrame, registry_dir: str, settings: RetrainSettings) -> dict:
    from forecasting.history import write_history
    from forecasting.spark.job import retrain, spark_session

    with tempfile.TemporaryDirectory() as history_dir:
        write_history(history.assign(job="job"), history_dir)
        summary = retrain(spark_session("local[2]"), history_dir, registry_dir, settings)
    if summary[0]["status"] != "ok":
        raise RuntimeError(f"retraining failed: {summary[0]['reason']}")
    return ModelRegistry(registry_dir).newest("job").metadata()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weeks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--interval-s", type=float, default=900.0)
    parser.add_argument("--spark", action="store_true", help="retrain through the Spark job (local[2])")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    structlog.configure(  # warnings and worse to stderr: stdout carries only the result
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
    result = compare(args.weeks, args.seed, args.spark, args.interval_s)
    if args.json:
        print(json.dumps(result))
        return
    print(f"history: {args.weeks} weeks; registry model {result['registry_model']}")
    print(f"backtest WAPE of the candidates: {result['backtest_wape']}")
    for name in ("registry", "last_hour"):
        score = result[name]
        print(
            f"{name:>10}: WAPE {score['wape']:.4f} (median per forecast {score['median_wape']:.4f}, "
            f"{score['forecasts']} forecasts; served by {score['models']})"
        )


if __name__ == "__main__":
    main()
