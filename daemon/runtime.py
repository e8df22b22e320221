"""`foresail run`: the daemon's life: load knowledge, drive the loop, stop cleanly on SIGTERM."""

from __future__ import annotations

import threading

import structlog

from config.schema import Config
from daemon.build import knowledge_settings, loop_interval_s, make_loop, make_twin
from daemon.lifecycle import log_started, save_and_close
from daemon.logs import configure_logging
from daemon.schedule import ScaledClock, run_scheduled, run_virtual, stop_on_signals
from forecasting.executor import InlineExecutor
from mape.knowledge import KnowledgeStore


def run_daemon(config: Config, max_iterations: int | None = None, stop: threading.Event | None = None) -> int:
    """Run until the trace ends, `max_iterations` ran, or SIGTERM/SIGINT; returns the exit code."""
    configure_logging(config.logging.level, config.logging.format)
    log = structlog.get_logger("foresail")
    if config.target.kind != "twin":
        from daemon.live import run_live  # real backends: Prometheus + Kubernetes or local Flink

        return run_live(config, max_iterations, stop)
    store = KnowledgeStore(config.knowledge.path, config.knowledge.decision_history)
    # Flat out on a virtual clock there is no wall time for background fits to use: run them inline.
    executor = InlineExecutor if config.twin.speedup == 0 else (lambda: None)
    knowledge = store.load(knowledge_settings(config, executor))
    start_s = knowledge.last_time_s or 0.0
    world = make_twin(config, initial_scaleout=knowledge.last_target_scaleout)
    world.twin.advance_to(start_s)  # the simulated job kept running while the daemon was away
    loop = make_loop(
        config, world.source, world.target, knowledge, store, structlog.get_logger("foresail.audit")
    )
    log_started(log, config, knowledge, start_s=start_s, trace_end_s=world.end_s)

    def step(now_s: float) -> bool:
        if now_s > world.end_s:
            return False
        world.twin.advance_to(now_s)
        loop.iterate(now_s)
        return True

    stop = stop or threading.Event()
    stop_on_signals(stop)
    interval_s, speedup = loop_interval_s(config), config.twin.speedup
    iterations = 0
    try:
        if speedup > 0:
            clock = ScaledClock(start_s, speedup)
            iterations = run_scheduled(step, clock.now, interval_s / speedup, stop, max_iterations)
        else:
            iterations = run_virtual(step, start_s, interval_s, stop, max_iterations)
    finally:
        save_and_close(log, store, knowledge, iterations)
    return 0
