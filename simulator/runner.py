"""`foresail simulate`: one whole trace on the twin, scored against the twin's ground truth."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import structlog

from config.schema import Config
from daemon.build import knowledge_settings, make_loop, make_twin
from forecasting.executor import InlineExecutor
from mape.knowledge import KnowledgeStore
from simulator.recoveries import recovery_summary
from simulator.score import score


def simulate(config: Config, audit_path: Path | None = None) -> dict[str, object]:
    """Run the loop over the whole trace at virtual speed; the summary the JSON output prints."""
    started = time.perf_counter()
    world = make_twin(config)
    store = KnowledgeStore(":memory:")
    knowledge = store.load(knowledge_settings(config, InlineExecutor))  # deterministic: fits run inline
    with _audit_logger(audit_path) as log:
        loop = make_loop(config, world.source, world.target, knowledge, store, log)
        capacity_errors, forecasts, observed = [], [], []
        interval_s = config.loop.interval_s
        now_s = interval_s
        while now_s <= world.end_s:
            world.twin.advance_to(now_s)
            true_rps = world.twin.true_capacity_rps()
            result = loop.iterate(now_s)
            observed.extend(result.recoveries)
            assessment = result.assessment
            if assessment is not None:
                estimate = assessment.capacity(assessment.current_scaleout)
                if math.isfinite(estimate) and true_rps > 0:
                    capacity_errors.append(abs(estimate - true_rps) / true_rps)
                if assessment.forecast_rps is not None:
                    forecasts.append((now_s, assessment.forecast_model, assessment.forecast_rps))
            now_s += interval_s
        world.twin.advance_to(world.end_s)
        knowledge.close()
    store.close()
    summary = score(world.twin, slo_s=config.twin.latency_slo_s)
    summary["capacity_estimate_error_pct"] = _median_pct(capacity_errors)
    summary.update(_forecast_quality(forecasts, world.twin.trace_rps))
    summary.update(recovery_summary(world.twin, config.recovery.target_s))
    summary["recovery_observed_median_s"] = _median([r.recovery_s for r in observed if r.recovered])
    summary["recovery_predicted_median_s"] = _median([r.predicted_s for r in observed if r.recovered])
    summary.update(
        policy=config.scaling.policy,
        seed=config.twin.seed,
        workload=config.twin.workload,
        iterations=knowledge.iteration,
        wall_time_s=round(time.perf_counter() - started, 2),
    )
    return summary


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


@contextmanager
def _audit_logger(path: Path | None) -> Iterator[structlog.typing.FilteringBoundLogger]:
    """The audit log to a file when asked, else a logger that drops info events cheaply."""
    if path is None:
        yield structlog.wrap_logger(
            structlog.ReturnLogger(), wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING)
        )
        return
    with path.open("w", encoding="utf-8") as handle:
        yield structlog.wrap_logger(
            structlog.PrintLogger(handle),
            processors=[
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.JSONRenderer(),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        )
