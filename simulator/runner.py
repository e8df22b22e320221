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
from daemon.build import capacity_settings, make_loop, make_twin
from mape.knowledge import KnowledgeStore
from simulator.score import score


def simulate(config: Config, audit_path: Path | None = None) -> dict[str, object]:
    """Run the loop over the whole trace at virtual speed; the summary the JSON output prints."""
    started = time.perf_counter()
    world = make_twin(config)
    store = KnowledgeStore(":memory:")
    knowledge = store.load(capacity_settings(config))
    with _audit_logger(audit_path) as log:
        loop = make_loop(config, world.source, world.target, knowledge, store, log)
        capacity_errors = []
        interval_s = config.loop.interval_s
        now_s = interval_s
        while now_s <= world.end_s:
            world.twin.advance_to(now_s)
            true_rps = world.twin.true_capacity_rps()
            result = loop.iterate(now_s)
            if result.assessment is not None:
                estimate = result.assessment.capacity(result.assessment.current_scaleout)
                if math.isfinite(estimate) and true_rps > 0:
                    capacity_errors.append(abs(estimate - true_rps) / true_rps)
            now_s += interval_s
        world.twin.advance_to(world.end_s)
    store.close()
    summary = score(world.twin, slo_s=config.twin.latency_slo_s)
    summary["capacity_estimate_error_pct"] = (
        round(float(np.median(capacity_errors)) * 100, 3) if capacity_errors else None
    )
    summary.update(
        policy=config.scaling.policy,
        seed=config.twin.seed,
        workload=config.twin.workload,
        iterations=knowledge.iteration,
        wall_time_s=round(time.perf_counter() - started, 2),
    )
    return summary


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
