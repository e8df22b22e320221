"""`foresail simulate`: one whole trace on the twin, scored against the twin's ground truth."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import numpy as np
import structlog

from config.load import ConfigError
from config.schema import Config
from daemon.build import TwinWorld, knowledge_settings, loop_interval_s, make_loop, make_twin, surge_watch_s
from daemon.schedule import virtual_times
from forecasting.executor import InlineExecutor
from mape.knowledge import Knowledge
from mape.knowledge_store import KnowledgeStore
from mape.latency_policy import LATENCY, LatencyKnowledge
from mape.loop import MapeLoop
from simulator.baselines import oracle_workers
from simulator.metrics import mean_latency_per_second_s
from simulator.recoveries import recovery_summary
from simulator.score import score
from simulator.twin import Twin
from simulator.vertex_score import VertexScorer


def simulate(
    config: Config, audit_path: Path | None = None, keep_series: bool = False, store_path: str = ":memory:"
) -> dict[str, object]:
    """Run the loop over the whole trace at virtual speed; the summary the JSON output prints.

    `keep_series` adds "series": the per-second record the comparison plots need (see `run_series`).
    `store_path`: the knowledge store to start from and save to (e.g. one `plan-capacity` seeded).
    """
    started = time.perf_counter()
    world = make_twin(config)
    store = KnowledgeStore(store_path)
    knowledge = store.load(knowledge_settings(config, InlineExecutor))  # deterministic: fits run inline
    with _audit_logger(audit_path) as (log, audit_failed):
        loop = make_loop(config, world.source, world.target, knowledge, store, log)
        capacity_errors, forecasts, observed = [], [], []
        capacity_changes = [(0, world.twin.true_capacity_rps())]
        all_errors: list[float] = []  # every scale-out's estimate, not just the current one's
        vertices = VertexScorer(world.twin)
        scaleouts = range(config.scaling.min_scaleout, config.scaling.max_scaleout + 1)
        for now_s in _iteration_times(loop, world, loop_interval_s(config), surge_watch_s(config)):
            true_rps = world.twin.true_capacity_rps()
            true_by_n = {n: world.twin.true_capacity_rps_for(n) for n in scaleouts}
            result = loop.iterate(now_s)
            audit_failed()
            vertices.observe_skew(result.skew)
            observed.extend(result.recoveries)
            if result.executed:
                capacity_changes.append((int(now_s), world.twin.true_capacity_rps()))
            assessment = result.assessment
            if assessment is not None:
                vertices.observe(assessment)
                estimate = assessment.capacity(assessment.current_scaleout)
                if math.isfinite(estimate) and true_rps > 0:
                    capacity_errors.append(abs(estimate - true_rps) / true_rps)
                all_errors.extend(
                    abs(c - true_by_n[n]) / true_by_n[n]
                    for n, c in assessment.capacities_rps.items()
                    if n in true_by_n and math.isfinite(c)
                )
                if assessment.forecast_rps is not None:
                    forecasts.append((now_s, assessment.forecast_model, assessment.forecast_rps))
        world.twin.advance_to(world.end_s)
        knowledge.close()
    store.close()
    summary = score(world.twin, slo_s=config.twin.latency_slo_s)
    summary["capacity_estimate_error_pct"] = _median_pct(capacity_errors)
    summary["capacity_error_all_scaleouts_median_pct"] = _median_pct(all_errors)
    summary["capacity_error_all_scaleouts_p90_pct"] = (
        round(float(np.percentile(all_errors, 90)) * 100, 3) if all_errors else None
    )
    summary.update(_forecast_quality(forecasts, world.twin.trace_rps))
    summary.update(
        vertices.summary(), topology=world.twin.topology.name, capacity_model=config.capacity.model
    )
    summary.update(granularity=world.twin.granularity, final_vertex_parallelism=world.twin.vertex_parallelism)
    summary.update(recovery_summary(world.twin, config.recovery.target_s))
    summary.update(_latency_summary(world.twin, config, knowledge))
    summary["recovery_observed_median_s"] = _median([r.recovery_s for r in observed if r.recovered])
    summary["recovery_predicted_median_s"] = _median([r.predicted_s for r in observed if r.recovered])
    summary.update(
        policy=config.scaling.policy,
        seed=config.twin.seed,
        workload=config.twin.workload,
        iterations=knowledge.iteration,
        wall_time_s=round(time.perf_counter() - started, 2),
    )
    if keep_series:
        summary["series"] = run_series(world.twin, capacity_changes)
    return summary


def _iteration_times(
    loop: MapeLoop, world: TwinWorld, interval_s: float, watch_s: float | None
) -> Iterator[float]:
    """When the loop iterates over the trace: every `interval_s`, and in between when the surge watch
    (reading every `watch_s`) sees a surge; the twin advanced to each time first."""
    for now_s, iteration in virtual_times(0.0, interval_s, watch_s):
        if now_s > world.end_s:
            return
        world.twin.advance_to(now_s)
        if iteration or loop.surge_seen(now_s):
            yield now_s


def _latency_summary(twin: Twin, config: Config, knowledge: Knowledge) -> dict[str, object]:
    """The share of seconds whose latency met scaling.latency_target_ms (a second with nothing to process
    meets it; one with records waiting but none processed counts the oldest one's age), the objective, and
    with the latency objective how far the queueing model was off. A p99 target is scored on each second's
    worst latency, an upper bound of its p99 (the twin keeps no per-record distribution), a mean one on the
    second's mean."""
    target_s = config.scaling.latency_target_ms / 1000.0
    latency = mean_latency_per_second_s(twin)
    if config.scaling.latency_target_stat == "p99":
        latency = np.fmax(latency, twin.history.view("worst_latency_s")[: len(latency)])
    met = ~(latency > target_s)  # NaN (nothing waited) meets it
    summary: dict[str, object] = {
        "objective": config.scaling.objective,
        "latency_target_ms": config.scaling.latency_target_ms,
        "latency_target_stat": config.scaling.latency_target_stat,
        "latency_target_met_share": round(float(met.mean()), 5) if len(met) else None,
    }
    state = knowledge.extensions.get(LATENCY)
    if isinstance(state, LatencyKnowledge):
        summary.update(state.summary())
    return summary


def run_series(twin: Twin, capacity_changes: list[tuple[int, float]]) -> dict[str, np.ndarray | float]:
    """Per second: input rate, workers, true capacity (0 while the job is down), backlog, the oracle's
    workers; and the latency histogram (records per whole-second delay; latency = delay + base)."""
    seconds = int(twin.now_s)
    starts = np.array([t for t, _ in capacity_changes])
    values = np.array([c for _, c in capacity_changes])
    capacity = values[np.searchsorted(starts, np.arange(seconds), side="right") - 1]
    history = twin.history
    return {
        "arrivals_rps": history.view("arrivals").astype(float),
        "workers": history.view("parallelism_at").copy(),
        "capacity_rps": np.where(history.view("running"), capacity, 0.0),
        "backlog_records": history.view("lag_at").astype(float),
        "oracle_workers": oracle_workers(twin),
        "latency_histogram": twin.latency.histogram,
        "base_latency_s": twin.latency.base_latency_s,
    }


def _forecast_quality(forecasts: list[tuple[float, str, np.ndarray]], trace_rps: np.ndarray) -> dict:
    """Median WAPE of each loop's whole-horizon forecast against what the trace then did, and the share of
    loops served by a fallback (linear or naive) instead of the ARIMA model."""
    wapes = []
    for now_s, _, rates in forecasts:
        start = int(now_s) + 1  # the forecast covers seconds now+1 .. now+horizon
        actual = trace_rps[start : start + len(rates)]
        if len(actual) == len(rates) and actual.sum() > 0:
            wapes.append(float(np.abs(actual - rates).sum() / actual.sum()))
    fallback = sum(1 for _, model, _ in forecasts if not model.startswith("arima"))
    return {
        "forecast_wape_median": round(float(np.median(wapes)), 4) if wapes else None,
        "fallback_share": round(fallback / len(forecasts), 4) if forecasts else None,
    }


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _median_pct(values: list[float]) -> float | None:
    return round(float(np.median(values)) * 100, 3) if values else None


class _AuditFile:
    """The audit log's file, keeping its first write error: the loop swallows an iteration's errors, so
    one raised from its logging would be lost and the run would go on with a log missing lines."""

    def __init__(self, handle: TextIO) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, text: str) -> None:
        self._guarded(self.handle.write, text)

    def flush(self) -> None:
        self._guarded(self.handle.flush)

    def _guarded(self, call: Callable[..., object], *args: object) -> None:
        if self.error is None:
            try:
                call(*args)
            except OSError as error:
                self.error = error


@contextmanager
def _audit_logger(
    path: Path | None,
) -> Iterator[tuple[structlog.typing.FilteringBoundLogger, Callable[[], None]]]:
    """The audit log to a file when asked, else a logger that drops info events cheaply; and a check to
    call after each iteration that raises a ConfigError (one line, not a traceback) once a write failed."""
    if path is None:
        yield (
            structlog.wrap_logger(
                structlog.ReturnLogger(), wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING)
            ),
            lambda: None,
        )
        return

    def failed(error: OSError | None) -> None:
        if error is not None:
            raise ConfigError("command line", [f"--audit-log {path}: {error.strerror or error}"]) from None

    try:
        handle = path.open("w", encoding="utf-8")
    except OSError as error:
        failed(error)
        raise  # not reached: `failed` raises for any error
    audit = _AuditFile(handle)
    logger = structlog.wrap_logger(
        structlog.PrintLogger(audit),
        processors=[
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
    )
    try:
        yield logger, lambda: failed(audit.error)
    finally:
        try:
            handle.close()
        except OSError as error:  # the last buffered lines: disk full shows here at the latest
            audit.error = audit.error or error
    failed(audit.error)
