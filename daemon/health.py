"""The daemon's own endpoint: `/healthz` (liveness), `/readyz` (readiness) and `/metrics` (Prometheus).

`/healthz` answers 200 while iterations keep finishing (within `unhealthy_after_loops` loop intervals of
the last one, or of the start) and 503 otherwise, so a stuck loop gets the pod restarted. `/readyz`
answers 503 until the first iteration (or standby turn) has finished, then follows `/healthz`: a daemon
that is still loading its knowledge or waiting for its backends is alive but not yet ready. `/metrics`
exposes what an operator wants on a dashboard: decisions by action, the capacity per scale-out, the
forecast, loop duration, rescale outcomes, leadership. A private registry keeps several daemons in one
process (tests) apart.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from config.schema import Config
from mape.loop import IterationResult
from mape.plausibility import reasons_in


class DaemonMetrics:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.registry = CollectorRegistry()
        self._monotonic = monotonic
        self.started_at = monotonic()
        self.last_iteration_at: float | None = None
        r = self.registry
        self.iterations = Counter("foresail_iterations", "MAPE-K iterations run.", registry=r)
        self.decisions = Counter(
            "foresail_decisions", "Decisions by action and rule.", ["action", "rule"], registry=r
        )
        self.executed = Counter(
            "foresail_rescales_executed", "Rescales requested from the target.", registry=r
        )
        self.errors = Counter("foresail_phase_errors", "Failed loop phases.", ["phase"], registry=r)
        self.loop_duration = Histogram(
            "foresail_loop_duration_seconds",
            "Wall time of one iteration.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.current_scaleout = Gauge("foresail_current_scaleout", "Scale-out the job runs at.", registry=r)
        self.target_scaleout = Gauge(
            "foresail_target_scaleout", "Scale-out of the last decision.", registry=r
        )
        self.workload = Gauge(
            "foresail_workload_avg_rps", "Average input rate over the loop window.", registry=r
        )
        self.backlog = Gauge("foresail_backlog_records", "Backlog at the last iteration.", registry=r)
        self.capacity = Gauge(
            "foresail_capacity_rps", "Estimated capacity per scale-out.", ["scaleout", "source"], registry=r
        )
        self.forecast_next = Gauge(
            "foresail_forecast_next_loop_max_rps", "Forecast peak until the next loop.", registry=r
        )
        self.forecast_horizon = Gauge(
            "foresail_forecast_horizon_max_rps", "Forecast peak over the horizon.", registry=r
        )
        self.forecast_wape = Gauge("foresail_forecast_wape", "Last WAPE of the forecast model.", registry=r)
        self.holding_on_problems = Gauge(
            "foresail_holding_on_bad_data", "1 when the last iteration held because of bad data.", registry=r
        )
        self.rescale_outcomes = Counter(
            "foresail_rescale_outcomes",
            "Followed rescales by outcome (ready, timeout).",
            ["outcome"],
            registry=r,
        )
        self.rescale_seconds = Gauge(
            "foresail_last_rescale_seconds",
            "Request → ready (or timeout) of the last followed rescale.",
            registry=r,
        )
        self.implausible = Counter(
            "foresail_implausible_metrics",
            "Iterations held on implausible metrics, by reason (mape/plausibility.py).",
            ["reason"],
            registry=r,
        )
        self.leader = Gauge("foresail_leader", "1 while this replica holds the leader Lease.", registry=r)
        self.paused = Gauge(
            "foresail_paused",
            "1 while the daemon does not act: paused by annotation, or another autoscaler scales the target.",
            registry=r,
        )
        self.last_iteration = Gauge(
            "foresail_last_iteration_timestamp_seconds",
            "Unix time of the last finished iteration.",
            registry=r,
        )
        self.managed_memory = Gauge(
            "foresail_managed_memory_mb",
            "Managed memory per slot the job runs with (memory-aware policy only).",
            registry=r,
        )
        self.skew_imbalance = Gauge(
            "foresail_vertex_skew_imbalance",
            "Per keyed vertex, max / mean of its subtasks' busy time (records in where busy is unknown).",
            ["vertex"],
            registry=r,
        )
        self.skew_persistent = Gauge(
            "foresail_vertex_skew_persistent",
            "1 while a keyed vertex's imbalance stays above 1.2 (scaling out does not help its hot subtask).",
            ["vertex"],
            registry=r,
        )

    def alive(self) -> None:
        """An iteration (or a standby or paused turn) finished: the loop is not stuck."""
        self.last_iteration_at = self._monotonic()
        self.last_iteration.set_to_current_time()

    def record(self, result: IterationResult, duration_s: float) -> None:
        self.alive()
        self.iterations.inc()
        self.loop_duration.observe(duration_s)
        decision, assessment = result.decision, result.assessment
        if decision is not None:
            self.decisions.labels(decision.action, decision.rule).inc()
            self.target_scaleout.set(decision.target_scaleout)
            self.holding_on_problems.set(1 if decision.rule in ("hold-bad-data", "hold-phase-error") else 0)
        if result.executed:
            self.executed.inc()
        for phase in result.errors:
            self.errors.labels(phase).inc()
        for vertex, skew in result.skew.items():
            imbalance = (
                skew["imbalance_busy"] if skew["imbalance_busy"] is not None else skew["imbalance_records"]
            )
            if imbalance is not None:
                self.skew_imbalance.labels(vertex).set(imbalance)
            self.skew_persistent.labels(vertex).set(1 if skew["skew_persistent"] else 0)
        if assessment is None:
            return
        for reason in reasons_in(assessment.problems):
            self.implausible.labels(reason).inc()
        self.current_scaleout.set(assessment.current_scaleout)
        self.workload.set(assessment.workload_avg_rps)
        self.backlog.set(assessment.backlog_records)
        self.capacity.clear()
        for scaleout, capacity in assessment.capacities_rps.items():
            self.capacity.labels(str(scaleout), assessment.capacity_sources.get(scaleout, "current")).set(
                capacity
            )
        if assessment.forecast_rps is not None and len(assessment.forecast_rps):
            self.forecast_next.set(float(assessment.forecast_rps[:60].max()))
            self.forecast_horizon.set(float(assessment.forecast_rps.max()))
        if assessment.forecast_wape is not None:
            self.forecast_wape.set(assessment.forecast_wape)
        if assessment.memory is not None:
            self.managed_memory.set(assessment.memory.managed_mb)

    def rescale_outcome(self, outcome: str, seconds: float) -> None:
        self.rescale_outcomes.labels(outcome).inc()
        self.rescale_seconds.set(seconds)

    def healthy(self, interval_s: float, unhealthy_after_loops: float) -> bool:
        since = self.last_iteration_at if self.last_iteration_at is not None else self.started_at
        return self._monotonic() - since <= unhealthy_after_loops * interval_s

    def ready(self, interval_s: float, unhealthy_after_loops: float) -> bool:
        return self.last_iteration_at is not None and self.healthy(interval_s, unhealthy_after_loops)


CLIENT_TIMEOUT_S = 5.0
"""The longest a connection is served, its reads and writes together."""
MAX_CLIENTS = 64
"""Connections served at once; more are closed at once: slow clients must not take the file descriptors
the knowledge store needs (a few hundred held the process at its limit and every save failed)."""


class _BoundedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer for hostile clients: a bounded number of connections, a backlog that absorbs a
    burst of probes (the default 5 made probes wait for a SYN retransmit), no spin when accept fails for
    lack of descriptors, no traceback for a client that hangs up, IPv6 where the host is an IPv6 address."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, object]:
        try:
            return super().get_request()
        except OSError as error:  # out of descriptors: the socket stays readable, serve_forever would spin
            if error.errno in (errno.EMFILE, errno.ENFILE):
                time.sleep(0.1)
            raise

    def process_request(self, request: socket.socket, client_address: object) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: object) -> None:
        """ThreadingMixIn's, with the slot freed before the connection closes: a client that sees it
        closed can be served at once."""
        # the handler's timeout bounds each read only: a client sending a byte every few seconds held its
        # slot for good, and 64 such kept every /healthz probe unanswered (a liveness probe restarts the pod)
        deadline = threading.Timer(CLIENT_TIMEOUT_S, _cut_off, (request,))
        deadline.daemon = True
        deadline.start()
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            deadline.cancel()
            self._slots.release()
            self.shutdown_request(request)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up or timed out is its own business; anything else is one line, no trace."""
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError | TimeoutError):
            print(f"foresail: health endpoint: {type(error).__name__}: {error}", file=sys.stderr)


def _cut_off(request: socket.socket) -> None:
    """Ends a connection past its deadline: its handler's next read or write fails."""
    with contextlib.suppress(OSError):
        request.shutdown(socket.SHUT_RDWR)


class HealthServer:
    """`/healthz`, `/readyz` and `/metrics` on a daemon thread."""

    def __init__(
        self,
        metrics: DaemonMetrics,
        host: str,
        port: int,
        healthy: Callable[[], bool],
        ready: Callable[[], bool] | None = None,
    ) -> None:
        registry = metrics.registry
        ready = ready or healthy

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    ok = healthy()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"loop stalled\n", "text/plain")
                elif path == "/readyz":
                    ok = ready()
                    self._send(200 if ok else 503, b"ready\n" if ok else b"not ready\n", "text/plain")
                elif path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # probes every few seconds: not for the audit log
                pass

        Handler.timeout = CLIENT_TIMEOUT_S  # each read; the connection's deadline is _BoundedServer's
        self.server = _BoundedServer((host, port), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_health(
    config: Config, metrics: DaemonMetrics, log: object, interval_s: float
) -> HealthServer | None:
    """The endpoint on `server.host:port` (None when the port is 0 or cannot be bound: the loop matters
    more than its probe, so it runs on and says so loudly). `interval_s`: the loop's wall interval."""
    if config.server.port == 0:
        return None
    loops = config.server.unhealthy_after_loops
    try:
        return HealthServer(
            metrics,
            config.server.host,
            config.server.port,
            lambda: metrics.healthy(interval_s, loops),
            lambda: metrics.ready(interval_s, loops),
        )
    except OSError as error:
        log.error("health-server-failed", host=config.server.host, port=config.server.port, error=str(error))
        return None
