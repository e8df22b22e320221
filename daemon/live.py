"""`foresail run` against real backends: Prometheus + Kubernetes or a local Flink cluster, on wall time.

One iteration every `loop.interval_s` (apscheduler; never two at once); the loop's times are UTC epoch
seconds. Only the leader iterates: a standby replica keeps its endpoint healthy and waits for the Lease.
SIGTERM/SIGINT finish the running iteration, persist, hand the Lease back and exit 0.
"""

from __future__ import annotations

import threading
import time
from typing import TextIO

import structlog

from backends.factory import make_real_backends
from config.schema import Config
from daemon.build import knowledge_settings, loop_interval_s, make_loop, surge_watch_s
from daemon.health import DaemonMetrics, serve_health
from daemon.lifecycle import load_knowledge, log_started, open_store, save_and_close
from daemon.schedule import run_scheduled, stop_on_signals


def run_live(
    config: Config,
    max_iterations: int | None = None,
    stop: threading.Event | None = None,
    fresh: bool = False,
    audit_file: TextIO | None = None,
) -> int:
    """The daemon on real backends until stopped; `fresh` empties the knowledge store and `audit_file`
    first. Exit code 1 when the final save failed."""
    log = structlog.get_logger("foresail")
    metrics = DaemonMetrics()
    server = serve_health(config, metrics, log, loop_interval_s(config))
    store = open_store(config.knowledge.path, config.knowledge.decision_history, fresh, audit_file)
    knowledge = load_knowledge(store, knowledge_settings(config))
    backends = make_real_backends(config, metrics.rescale_outcome)
    loop = make_loop(
        config, backends.source, backends.target, knowledge, store, structlog.get_logger("foresail.audit")
    )
    log_started(
        log,
        config,
        knowledge,
        recommend_only=config.target.recommend_only,
        health_port=server.port if server else None,
    )
    backends.start()

    def step(now_s: float, watch_only: bool = False) -> bool:
        """An iteration at `now_s` (always True: the daemon runs until stopped); with `watch_only` the
        surge watch, True when it ran one (a standby never reads)."""
        leader = backends.is_leader()
        metrics.leader.set(1 if leader else 0)
        if watch_only and not (leader and loop.surge_seen(now_s)):
            return False
        if not leader:
            metrics.alive()  # a standby is healthy (and ready) while it waits
            log.info(
                "standby",
                time_s=now_s,
                reason="not holding the leader Lease (another replica leads, or the API server cannot be reached)",
            )
            return True
        blocked = backends.oversight.blocked() if backends.oversight is not None else None
        metrics.paused.set(1 if blocked else 0)
        # blocked (paused, another autoscaler): the loop still observes and learns, but only recommends
        backends.target.recommend_only = config.target.recommend_only or blocked is not None
        if blocked:
            log.warning("not-acting", time_s=now_s, reason=blocked)
        started = time.perf_counter()
        result = loop.iterate(now_s)
        metrics.record(result, time.perf_counter() - started)
        if backends.oversight is not None:
            backends.oversight.iteration(
                result.decision, result.executed, result.errors, result.recommendation
            )
        return True

    stop = stop or threading.Event()
    stop_on_signals(stop)
    iterations = 0
    try:
        watch_s = surge_watch_s(config)
        watch = (lambda now_s: step(now_s, watch_only=True), watch_s) if watch_s else None
        iterations = run_scheduled(step, time.time, loop_interval_s(config), stop, max_iterations, watch)
    finally:
        saved = save_and_close(log, store, knowledge, iterations)
        backends.close()
        if server is not None:
            server.close()
    return 0 if saved else 1
