"""Loop iteration time with 12, 100 and 1,000 workers: analysis + plan, and the forecaster update.

Usage: python benchmarks/loop_latency.py [--iterations 200] [--json]

Analysis + plan runs the real Analyzer and foresail policy on synthetic windows (12 samples per worker,
60 s at a 5 s scrape step); the forecast is replaced by a fixed one there, and the forecaster's own
update (observe + forecast with a fitted ARIMA model on 2 hours of 10 s buckets) is timed separately.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import structlog

from config.schema import Config
from daemon.build import knowledge_settings, make_plan
from forecasting.blas import limit_blas_threads
from forecasting.executor import InlineExecutor
from forecasting.online import WorkloadForecaster
from forecasting.types import ForecastSettings
from mape.analyze import Analyzer
from mape.knowledge import Knowledge
from mape.types import Observation, WorkerSeries

SCRAPE_S, WINDOW_S, PER_WORKER_RPS = 5.0, 60.0, 5_000.0


def _observation(now_s: float, workers: int, rng: np.random.Generator) -> Observation:
    stamps = np.arange(now_s - WINDOW_S + SCRAPE_S, now_s + 1e-9, SCRAPE_S)
    load = 0.4 + 0.3 * np.sin(now_s / 1800.0)
    series = []
    for index in range(workers):
        share = 1.0 + 0.15 * np.sin(index)
        tput = PER_WORKER_RPS * load * share * (1 + 0.01 * rng.standard_normal(len(stamps)))
        cpu = 0.11 + 0.84 * tput / PER_WORKER_RPS + 0.01 * rng.standard_normal(len(stamps))
        series.append(WorkerSeries(f"tm-{index:05d}", stamps, cpu, tput))
    total = PER_WORKER_RPS * load * workers
    return Observation(
        now_s, WINDOW_S, stamps, np.full(len(stamps), total), tuple(series), 0.0, workers, now_s
    )


class _FixedForecaster:
    """Stands in for the forecaster so that analysis + plan is timed alone."""

    def __init__(self, forecast: object) -> None:
        self._forecast = forecast

    def observe(self, timestamps_s: np.ndarray, rates_rps: np.ndarray) -> None:
        pass

    def forecast(self, now_s: float) -> object:
        return self._forecast


def analyze_plan_ms(workers: int, iterations: int) -> list[float]:
    config = Config.model_validate({"scaling": {"max_scaleout": max(18, workers), "stabilization_s": 0}})
    knowledge = Knowledge.fresh(knowledge_settings(config, InlineExecutor))
    rng = np.random.default_rng(0)
    horizon = ForecastSettings().horizon_steps
    fixed = WorkloadForecaster(ForecastSettings(), InlineExecutor()).forecast(0.0)
    knowledge.forecaster = _FixedForecaster(
        type(fixed)(0.0, np.full(horizon, PER_WORKER_RPS * 0.5 * workers), "fixed", "benchmark", None, 0)
    )
    analyzer = Analyzer(config.scaling.max_scaleout, 30.0, 10.0)
    plan = make_plan(config)
    timings = []
    for step in range(iterations + 5):
        observation = _observation(600.0 + 60.0 * step, workers, rng)
        started = time.perf_counter()
        plan.decide(analyzer.assess(observation, knowledge), knowledge)
        if step >= 5:  # the first iterations fill the regressions
            timings.append((time.perf_counter() - started) * 1000)
    knowledge.recovery.close()
    return timings


def forecast_update_ms(iterations: int) -> list[float]:
    settings = ForecastSettings(min_history_s=3600.0, max_history_s=7200.0)
    forecaster = WorkloadForecaster(settings, InlineExecutor())
    seconds = np.arange(0.0, 7200.0 + 60.0 * iterations, 5.0)
    rates = (
        30_000
        + 10_000 * np.sin(seconds / 1800.0)
        + 500 * np.random.default_rng(1).standard_normal(len(seconds))
    )
    history = seconds <= 7200.0
    forecaster.observe(seconds[history], rates[history])
    forecaster.forecast(7200.0)  # fits inline
    timings = []
    for step in range(1, iterations + 1):
        now = 7200.0 + 60.0 * step
        window = (seconds > now - 60.0) & (seconds <= now)
        started = time.perf_counter()
        forecaster.observe(seconds[window], rates[window])
        forecaster.forecast(now)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def main() -> None:
    limit_blas_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    forecast = forecast_update_ms(min(args.iterations, 60))
    results = {}
    for workers in (12, 100, 1000):
        timings = analyze_plan_ms(
            workers, args.iterations if workers < 1000 else max(20, args.iterations // 5)
        )
        results[str(workers)] = {
            "analyze_plan_ms_p50": round(float(np.percentile(timings, 50)), 2),
            "analyze_plan_ms_p99": round(float(np.percentile(timings, 99)), 2),
            "forecast_update_ms_p50": round(float(np.percentile(forecast, 50)), 2),
        }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'workers':>8} {'analyze+plan p50 ms':>20} {'p99 ms':>8} {'forecast update p50 ms':>23}")
    for workers, row in results.items():
        print(
            f"{workers:>8} {row['analyze_plan_ms_p50']:>20} {row['analyze_plan_ms_p99']:>8} "
            f"{row['forecast_update_ms_p50']:>23}"
        )


if __name__ == "__main__":
    main()
