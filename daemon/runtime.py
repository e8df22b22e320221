"""`foresail run`: the daemon's life: load knowledge, drive the loop, stop cleanly on SIGTERM."""

from __future__ import annotations

import math
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

import structlog

from backends.retry import allow_waiting
from config.schema import Config
from daemon.build import TwinWorld, knowledge_settings, loop_interval_s, make_loop, make_twin, surge_watch_s
from daemon.health import DaemonMetrics, serve_health
from daemon.lifecycle import (
    CannotStart,
    audit_names,
    load_knowledge,
    log_started,
    open_store,
    save_and_close,
    starting,
)
from daemon.logs import configure_logging
from daemon.progress import RunProgress, clock
from daemon.schedule import ScaledClock, run_scheduled, run_virtual, stop_on_signals
from forecasting.executor import InlineExecutor
from mape.interfaces import NotApplied
from mape.knowledge import Knowledge
from mape.knowledge_store import StoreBusy
from simulator.score import mark, score_since


def run_daemon(
    config: Config,
    max_iterations: int | None = None,
    stop: threading.Event | None = None,
    fresh: bool = False,
    audit_log: str | None = None,
) -> int:
    """Run until the trace ends, `max_iterations` ran, or SIGTERM/SIGINT; returns the exit code.

    `fresh` empties the knowledge store and the audit log first (once this daemon holds the store, never
    another daemon's). The audit log goes to `audit_log` ("-": stdout); by default to stdout, except on
    the twin in a terminal, where a person reads the progress line and the summary (stderr) and the audit
    log goes to a file beside the knowledge store. What stops the start (the store held by another daemon,
    missing credentials or files, a path the file system refuses) is one line on stderr: exit 1 for a busy
    store, 2 for a start-up problem. A failed final save is one line too, exit 1.
    """
    allow_waiting()
    try:
        return _run(config, max_iterations, stop, fresh, audit_log)
    except StoreBusy as error:
        print(f"foresail: {error}", file=sys.stderr)
        return 1
    except CannotStart as error:
        print(f"foresail: cannot start: {error}", file=sys.stderr)
        return 2
    except _startup_errors() as error:
        print(f"foresail: cannot start: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


def _startup_errors() -> tuple[type[BaseException], ...]:
    from kubernetes.config.config_exception import ConfigException

    return (ConfigException, FileNotFoundError, PermissionError, IsADirectoryError)


def _run(
    config: Config,
    max_iterations: int | None,
    stop: threading.Event | None,
    fresh: bool,
    audit_log: str | None,
) -> int:
    with ExitStack() as files:
        audit_path = _audit_path(config, audit_log)
        stream, audit_file = sys.stdout, None
        if audit_path is not None:
            with starting():  # appended to: `fresh` empties it only once the store is held
                stream = audit_file = files.enter_context(open(audit_path, "a", encoding="utf-8"))
        configure_logging(config.logging.level, config.logging.format, stream, audit_names(config))
        if config.target.kind != "twin":
            from daemon.live import run_live  # real backends: Prometheus + Kubernetes or local Flink

            return run_live(config, max_iterations, stop, fresh, audit_file)
        return _run_twin(config, max_iterations, stop, fresh, audit_file, audit_path or "stdout")


def _audit_path(config: Config, audit_log: str | None) -> str | None:
    if audit_log == "-" or (audit_log is None and (config.target.kind != "twin" or not sys.stdout.isatty())):
        return None
    if audit_log is not None:
        return audit_log
    knowledge = config.knowledge.path
    directory = Path(knowledge).parent if knowledge != ":memory:" else Path()
    return str(directory / "foresail-audit.jsonl")


def _run_twin(
    config: Config,
    max_iterations: int | None,
    stop: threading.Event | None,
    fresh: bool,
    audit_file: TextIO | None,
    audit: str,
) -> int:
    log = structlog.get_logger("foresail")
    store = open_store(config.knowledge.path, config.knowledge.decision_history, fresh, audit_file)
    # Flat out on a virtual clock there is no wall time for background fits to use: run them inline.
    executor = InlineExecutor if config.twin.speedup == 0 else (lambda: None)
    knowledge = load_knowledge(store, knowledge_settings(config, executor))
    start_s = _resume_time(knowledge, log)
    world = _resume_twin(config, store.attached("twin"), knowledge.last_target_scaleout, start_s, log)
    store.attachments["twin"] = world.twin.snapshot  # saved with every iteration
    started = mark(world.twin)  # a resumed twin's history before here is a replay, not what happened
    interval_s, speedup = loop_interval_s(config), config.twin.speedup
    _say_resumed(config, knowledge.iteration, start_s, world.end_s, interval_s)
    _say_seeded_for_another_job(config, knowledge, world)
    if start_s > world.end_s:
        log.info("trace-finished", resumed_at_s=start_s, trace_end_s=world.end_s)
        knowledge.close()
        store.close()
        return 0
    target = RecommendOnly(config.target.kind) if config.target.recommend_only else world.target
    loop = make_loop(config, world.source, target, knowledge, store, structlog.get_logger("foresail.audit"))
    log_started(
        log, config, knowledge, start_s=start_s, trace_end_s=world.end_s, dry_run=config.target.recommend_only
    )
    progress = RunProgress(sys.stderr, start_s, world.end_s, interval_s)

    def step(now_s: float, watch_only: bool = False) -> bool:
        """An iteration at `now_s` (False past the trace's end); with `watch_only` the surge watch, True
        when it ran one."""
        if now_s > world.end_s:
            return False
        world.twin.advance_to(now_s)
        if watch_only and not loop.surge_seen(now_s):
            return False
        started = time.perf_counter()
        result = loop.iterate(now_s)
        progress.record(result, surge=watch_only)
        if metrics is not None:
            metrics.record(result, time.perf_counter() - started)
        return True

    def watch(now_s: float) -> bool:
        return step(now_s, watch_only=True)

    watch_s = surge_watch_s(config)

    stop = stop or threading.Event()
    stop_on_signals(stop)
    iterations = 0
    metrics, server = None, None
    try:
        if speedup > 0:  # on wall time the twin serves /healthz, /readyz and /metrics like a real daemon
            metrics = DaemonMetrics()
            server = serve_health(config, metrics, log, interval_s / speedup)
            clock = ScaledClock(start_s, speedup)
            iterations = run_scheduled(
                step,
                clock.now,
                interval_s / speedup,
                stop,
                max_iterations,
                (watch, watch_s / speedup) if watch_s else None,
            )
        else:
            watching = (watch, watch_s) if watch_s else None
            iterations = run_virtual(step, start_s, interval_s, stop, max_iterations, watching)
    finally:
        saved = save_and_close(log, store, knowledge, iterations)
        if server is not None:
            server.close()
    if not saved:
        return 1
    if iterations:
        summary = score_since(world.twin, started, slo_s=config.twin.latency_slo_s)
        report = progress.summary(
            summary, config.knowledge.path, audit, config.twin.workload, config.twin.topology
        )
        print(report, file=sys.stderr)
    elif not stop.is_set():
        print(
            f"foresail run: no iteration ran: the trace has {world.end_s - start_s:.0f} s left from "
            f"{start_s:.0f} s, less than one loop.interval_s ({interval_s:g} s)",
            file=sys.stderr,
        )
    return 0


class RecommendOnly:
    """`--dry-run` on the twin: every decision is logged and none is applied (as on real backends)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def scale_to(self, scaleout: int, now_s: float) -> None:
        raise NotApplied(f"dry run: scale-out {scaleout} recommended, not applied to the {self.kind}")

    def reconfigure(self, scaleout: int, managed_mb: float, now_s: float) -> None:
        raise NotApplied(
            f"dry run: scale-out {scaleout} with {managed_mb:.0f} MB managed memory recommended, not applied"
        )


def _say_resumed(config: Config, iteration: int, start_s: float, end_s: float, interval_s: float) -> None:
    """A resumed run says so, and how to start afresh (stderr: the audit log stays machine-readable)."""
    if iteration == 0:
        return
    path = config.knowledge.path
    afresh = "`foresail run --fresh` starts afresh"
    if start_s + interval_s > end_s:
        print(
            f"foresail run: nothing left to run: the knowledge store {path} already covers the whole trace "
            f"({iteration} iterations, {clock(end_s)}); {afresh}",
            file=sys.stderr,
        )
    else:
        print(
            f"foresail run: resuming at iteration {iteration} (trace {clock(start_s)} of {clock(end_s)}) "
            f"from the knowledge store {path}; {afresh}",
            file=sys.stderr,
        )


def _say_seeded_for_another_job(config: Config, knowledge: Knowledge, world: TwinWorld) -> None:
    """A store a capacity plan seeded for another job than the twin's: its seeds are dropped at the first
    iteration (`Knowledge.check_seeded_job`, an error event in the audit log); said here too, where the
    user sees it, with the likely cause (planned and run with different topologies)."""
    names = sorted(v.name for v in world.twin.topology.vertices)
    if not knowledge.seeded_for_another_job(names):
        return
    print(
        f"foresail run: the knowledge store {config.knowledge.path} was seeded by a capacity plan of another "
        f"job (vertices {', '.join(knowledge.seeded_for)}) than topology {config.twin.topology} "
        f"({', '.join(names)}): the seeds are dropped and the daemon starts cold; run with the plan's "
        "--topology",
        file=sys.stderr,
    )


def _resume_time(knowledge: Knowledge, log: object) -> float:
    """Where the twin resumes: the stored loop time. One that is not a finite time >= 0 (a damaged or edited
    store) would crash the twin's clock: it is dropped with a warning and the run starts at the trace start."""
    last = knowledge.last_time_s
    if last is None:
        return 0.0
    if isinstance(last, (int, float)) and not isinstance(last, bool) and math.isfinite(last) and last >= 0:
        return float(last)
    log.warning("stored-time-ignored", last_time_s=repr(last), resumed_at_s=0.0)
    knowledge.last_time_s = None
    return 0.0


def _resume_twin(
    config: Config, state: dict | None, scaleout: int | None, start_s: float, log: object
) -> TwinWorld:
    """The simulated job as the daemon left it: its saved state (backlog, offsets, run state) when there is
    one for `start_s`, else replayed from the trace start at the last scale-out. A stored value the twin
    refuses (damaged or edited: not a finite number in its range) is dropped with a warning."""
    try:
        if state is not None and int(state.get("t", -1)) == int(start_s):
            world = make_twin(config, initial_scaleout=int(state["parallelism"]))
            world.twin.restore(state)
            return world
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as error:
        log.warning("twin-state-not-restored", error=f"{type(error).__name__}: {error}")
    try:
        world = make_twin(config, initial_scaleout=scaleout)
    except (TypeError, ValueError, OverflowError) as error:
        if scaleout is None:
            raise
        log.warning(
            "stored-scaleout-ignored", scaleout=repr(scaleout), error=f"{type(error).__name__}: {error}"
        )
        world = make_twin(config)
    world.twin.advance_to(min(start_s, world.end_s))  # the simulated job kept running while away
    return world
