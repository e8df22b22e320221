"""How much of foresail's gap to the oracle floor is the forecast's: the same runs with a perfect forecast.

Per load and seed, foresail runs twice on the twin: as shipped, and with every forecast replaced by the
trace's true next seconds (also as the upper bound: no uncertainty). What is left with a perfect forecast
is the plan's own price (long-lived sizing over the horizon, the lag SLO's headroom after a restart, the
recovery target, the capacity model's margins) and the restarts'. `--config` runs both on another base
config, e.g. with rules relaxed, to see which of them the rest comes from. Diagnostic only: the perfect
forecast is swapped in here (a patched `WorkloadForecaster.forecast`), the product has no such mode.

Usage: python benchmarks/perfect_forecast.py [--loads sine,ysb,traffic,shape:spikes] [--seeds 3]
       [--config FILE] [--jobs 2]
"""

from __future__ import annotations

from forecasting.blas import limit_blas_threads  # first: one BLAS thread for every library loaded later

# isort: split

import argparse
import dataclasses
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from config.load import load_config, with_overrides
from config.schema import Config
from daemon.build import load_workload
from daemon.logs import configure_logging
from daemon.report import TRACES, WORKLOADS
from daemon.simulate import simulate
from forecasting.online import WorkloadForecaster
from forecasting.types import Forecast

FIGURES = ("avg_workers", "floor_avg_workers", "seconds_over_slo", "rescales", "duration_s")


def perfect(forecast: Forecast, trace_rps: np.ndarray) -> Forecast:
    """The forecast's seconds filled with what the trace brings (its last value past the end)."""
    start, length = int(forecast.start_s) + 1, len(forecast.rates_rps)
    future = trace_rps[start : start + length]
    future = np.concatenate([future, np.full(length - len(future), trace_rps[-1])])
    return dataclasses.replace(forecast, rates_rps=future, central_rps=None, upper_rps=future)


def on_load(config: Config, load: str, seed: int) -> Config:
    """The config with the twin replaying `load` (a shared trace's name or `shape:NAME`) at `seed`."""
    spec = load if load.startswith("shape:") else str(WORKLOADS / TRACES[load])
    return with_overrides(config, "twin", workload=spec, seed=seed)


@contextmanager
def foresight(config: Config, enabled: bool = True) -> Iterator[None]:
    """Inside, every forecast is the trace the config's twin replays (when `enabled`)."""
    original = WorkloadForecaster.forecast
    if enabled:
        trace = np.asarray(load_workload(config.twin.workload), dtype=float)
        WorkloadForecaster.forecast = lambda self, now_s: perfect(original(self, now_s), trace)
    try:
        yield
    finally:
        WorkloadForecaster.forecast = original


def run(task: tuple[Config, str, int, bool]) -> dict[str, float]:
    """One simulation; with `perfectly` the forecaster's answers are replaced by the truth."""
    config, load, seed, perfectly = task
    limit_blas_threads()
    configure_logging("warning", "console", sys.stderr)
    config = on_load(config, load, seed)
    with foresight(config, perfectly):
        summary = simulate(config)
    return {name: float(summary[name]) for name in FIGURES}


def main() -> None:
    limit_blas_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="sine,ysb,traffic")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--config", type=Path, help="base config (default: the shipped defaults)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    config = with_overrides(load_config(args.config), "knowledge", path=":memory:")
    loads = [load.strip() for load in args.loads.split(",") if load.strip()]
    tasks = [(config, load, seed, foresight) for load in loads for foresight in (False, True)
             for seed in range(args.seeds)]  # fmt: skip
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(run, tasks))
    print("| load | forecast | avg workers | ÷ oracle | s over SLO | rescales/h |")
    print("|---|---|---:|---:|---:|---:|")
    for load in loads:
        for foresight in (False, True):
            rows = [r for t, r in zip(tasks, results, strict=True) if t[1] == load and t[3] == foresight]
            mean = {name: float(np.mean([r[name] for r in rows])) for name in FIGURES}
            print(
                f"| {load} | {'perfect' if foresight else 'foresail'} | {mean['avg_workers']:.2f} "
                f"| {mean['avg_workers'] / mean['floor_avg_workers']:.2f} | {mean['seconds_over_slo']:.0f} "
                f"| {mean['rescales'] * 3600 / mean['duration_s']:.1f} |"
            )


if __name__ == "__main__":
    main()
