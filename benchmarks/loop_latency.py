"""Loop iteration time: analysis + plan at 12, 100 and 1,000 workers and on a 10-vertex job of 100 subtasks
per vertex, and the forecaster update.

Usage: python benchmarks/loop_latency.py [--iterations 200] [--json]

Analysis + plan runs the real Analyzer (`capacity_model="dag"`, the default) and foresail policy on
synthetic windows of 12 samples (60 s at a 5 s scrape step); the forecast is replaced by a fixed one there,
and the forecaster's own update (observe + forecast with a fitted ARIMA model on 2 hours of 10 s buckets)
is timed separately. The cases:

- `12`, `100`, `1000`: N workers, each a CPU and throughput series, and no job graph or task metrics, so
  the analysis takes the job-level path (CPU lines; the Assessment says "no per-vertex metrics"), as for
  a backend without per-vertex metrics. max_scaleout = max(18, N).
- `10x100`: 100 workers and a job graph of 10 vertices in a chain, the edges into vertices 1, 5 and 9 keyed
  (HASH, 128 key groups, skewed keys), the others REBALANCE, each vertex at parallelism 100 with one `SubtaskSeries` per subtask (records in and
  out, busy / backpressured / idle ms per second), so the per-vertex analysis (true rates, selectivities,
  key loads, DS2's walk and each vertex's needed parallelism) runs beside the CPU lines. max_scaleout = 100.
"""

from __future__ import annotations

from forecasting.blas import limit_blas_threads  # first: one BLAS thread for every library loaded later

# isort: split

import argparse
import json
import math
import time

import numpy as np
import structlog

from config.schema import Config
from daemon.build import knowledge_settings, make_plan
from forecasting.executor import InlineExecutor
from forecasting.online import WorkloadForecaster
from forecasting.types import ForecastSettings
from mape.analyze import Analyzer
from mape.knowledge import Knowledge
from messages.types import JobEdge, JobGraph, JobVertex, Observation, SubtaskSeries, WorkerSeries

SCRAPE_S, WINDOW_S, PER_WORKER_RPS = 5.0, 60.0, 5_000.0
DAG_VERTICES, DAG_SUBTASKS, MAX_PARALLELISM = 10, 100, 128
SELECTIVITY = (1.0, 1.5, 1.0, 0.8, 1.0, 1.2, 0.5, 1.0, 1.0, 1.0)
BUSY_MS_PER_RECORD = (0.02, 0.05, 0.04, 0.08, 0.03, 0.06, 0.1, 0.05, 0.04, 0.07)


def _job_graph() -> JobGraph:
    vertices = tuple(
        JobVertex(f"v{v:02d}", f"vertex-{v}", DAG_SUBTASKS, MAX_PARALLELISM) for v in range(DAG_VERTICES)
    )
    edges = tuple(
        JobEdge(f"v{v - 1:02d}", f"v{v:02d}", "HASH" if v % 4 == 1 else "REBALANCE")
        for v in range(1, DAG_VERTICES)
    )
    return JobGraph(vertices, edges)


def _subtasks(
    graph: JobGraph, stamps: np.ndarray, worker_rps: np.ndarray, rng: np.random.Generator
) -> tuple[SubtaskSeries, ...]:
    """Per vertex and subtask, task metrics consistent with the chain: each vertex receives the source rate
    times the upstream selectivities; a keyed vertex's subtasks get skewed shares of it."""
    skew = 1.0 + 0.3 * np.sin(np.arange(DAG_SUBTASKS) * 0.7)
    skew /= skew.mean()
    ratio, series = 1.0, []
    for v, vertex in enumerate(graph.vertices):
        if v:
            ratio *= SELECTIVITY[v - 1]
        shares = skew if graph.keyed(vertex.vertex_id) else np.ones(DAG_SUBTASKS)
        for i in range(DAG_SUBTASKS):
            records_in = ratio * shares[i] * worker_rps[i] * (1 + 0.005 * rng.standard_normal(len(stamps)))
            busy = np.minimum(
                20.0 + BUSY_MS_PER_RECORD[v] * records_in + 2.0 * rng.standard_normal(len(stamps)), 1000.0
            )
            backpressured = np.zeros(len(stamps))
            series.append(
                SubtaskSeries(
                    vertex.vertex_id,
                    i,
                    f"tm-{i:05d}",
                    stamps,
                    records_in,
                    records_in * SELECTIVITY[v],
                    busy,
                    backpressured,
                    1000.0 - busy - backpressured,
                )
            )
    return tuple(series)


def _observation(
    now_s: float, workers: int, rng: np.random.Generator, graph: JobGraph | None = None
) -> Observation:
    stamps = np.arange(now_s - WINDOW_S + SCRAPE_S, now_s + 1e-9, SCRAPE_S)
    load = 0.4 + 0.3 * np.sin(now_s / 1800.0)
    series = []
    for index in range(workers):
        share = 1.0 + 0.15 * np.sin(index)
        tput = PER_WORKER_RPS * load * share * (1 + 0.01 * rng.standard_normal(len(stamps)))
        cpu = 0.11 + 0.84 * tput / PER_WORKER_RPS + 0.01 * rng.standard_normal(len(stamps))
        series.append(WorkerSeries(f"tm-{index:05d}", stamps, cpu, tput))
    total = PER_WORKER_RPS * load * workers
    subtasks = ()
    if graph is not None:
        worker_rps = PER_WORKER_RPS * load * (1.0 + 0.15 * np.sin(np.arange(workers)))
        subtasks = _subtasks(graph, stamps, worker_rps, rng)
    return Observation(
        now_s,
        WINDOW_S,
        stamps,
        np.full(len(stamps), total),
        tuple(series),
        0.0,
        workers,
        now_s,
        job_graph=graph,
        subtasks=subtasks,
    )


class _FixedForecaster:
    """Stands in for the forecaster so that analysis + plan is timed alone."""

    def __init__(self, forecast: object) -> None:
        self._forecast = forecast
        self.last_forecast = forecast

    def observe(self, timestamps_s: np.ndarray, rates_rps: np.ndarray, now_s: float | None = None) -> None:
        pass

    def forecast(self, now_s: float) -> object:
        return self._forecast


def analyze_plan_ms(workers: int, iterations: int, dag: bool = False) -> tuple[list[float], list[float]]:
    """Analysis + plan wall and CPU times (ms) of `iterations` loop iterations; the observations are built
    untimed. The CPU time (this thread's) is what the wall time would be on a machine without other load."""
    scaling = {"max_scaleout": max(18, workers), "stabilization_s": 0}
    config = Config.model_validate(
        {"target": {"kind": "prometheus+kubernetes"}, "scaling": scaling}
    )  # no twin
    knowledge = Knowledge.fresh(knowledge_settings(config, InlineExecutor))
    rng = np.random.default_rng(0)
    horizon = ForecastSettings().horizon_steps
    fixed = WorkloadForecaster(ForecastSettings(), InlineExecutor()).forecast(0.0)
    knowledge.forecaster = _FixedForecaster(
        type(fixed)(0.0, np.full(horizon, PER_WORKER_RPS * 0.5 * workers), "fixed", "benchmark", None, 0)
    )
    analyzer = Analyzer(
        config.scaling.max_scaleout, 30.0, 10.0, capacity_model="dag", lag_slo_s=config.recovery.lag_slo_s
    )
    plan = make_plan(config)
    graph = _job_graph() if dag else None
    timings, cpu_timings = [], []
    for step in range(iterations + 5):
        observation = _observation(600.0 + 60.0 * step, workers, rng, graph)
        started, cpu_started = time.perf_counter(), time.thread_time()
        plan.decide(analyzer.assess(observation, knowledge), knowledge)
        if step >= 5:  # the first iterations fill the regressions
            timings.append((time.perf_counter() - started) * 1000)
            cpu_timings.append((time.thread_time() - cpu_started) * 1000)
    knowledge.recovery.close()
    return timings, cpu_timings


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


CASES = {"12": (12, False), "100": (100, False), "1000": (1000, False), "10x100": (DAG_SUBTASKS, True)}


def main() -> None:
    limit_blas_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES)
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-forecast", action="store_true", help="skip timing the forecaster update")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    forecast = [math.nan] if args.no_forecast else forecast_update_ms(min(args.iterations, 60))
    results = {}
    for case in args.cases.split(","):
        workers, dag = CASES[case]
        heavy = workers >= 1000 or dag
        timings, cpu = analyze_plan_ms(
            workers, max(20, args.iterations // 5) if heavy else args.iterations, dag
        )
        results[case] = {
            "analyze_plan_ms_p50": round(float(np.percentile(timings, 50)), 2),
            "analyze_plan_ms_p99": round(float(np.percentile(timings, 99)), 2),
            "analyze_plan_cpu_ms_p50": round(float(np.percentile(cpu, 50)), 2),
            "analyze_plan_cpu_ms_p99": round(float(np.percentile(cpu, 99)), 2),
            "forecast_update_ms_p50": round(float(np.percentile(forecast, 50)), 2),
        }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"{'case':>8} {'analyze+plan p50 ms':>20} {'p99 ms':>8} {'cpu p50 ms':>11} {'cpu p99 ms':>11} "
        f"{'forecast update p50 ms':>23}"
    )
    for case, row in results.items():
        print(
            f"{case:>8} {row['analyze_plan_ms_p50']:>20} {row['analyze_plan_ms_p99']:>8} "
            f"{row['analyze_plan_cpu_ms_p50']:>11} {row['analyze_plan_cpu_ms_p99']:>11} "
            f"{row['forecast_update_ms_p50']:>23}"
        )


if __name__ == "__main__":
    main()
