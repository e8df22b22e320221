"""`MetricsSource` over Prometheus: the loop window read with the configured PromQL queries.

It mirrors the twin's source: per-worker series (CPU, throughput) and the input rate on the grid of
multiples of `step_s` in the window, the backlog, parallelism, uptime and restarts at `now`. Whatever
cannot be had — an unreachable or slow server, an error answer, garbage, no series, NaN, stale data — is
left None/NaN and named in `problems`, so the loop holds; `observe` itself never raises for the server's
sake. After the first connection failure or timeout the remaining queries are skipped, so a dead server
costs one timeout per loop, not one per query.

The per-operator state signals (memory levels) are read with instant queries at `now` over the loop
window (`$window` in a query). Their failures are logged, never made problems: without them the
memory-aware policy falls back to a CPU-only decision, and the loop must not hold for that.

The job's latency (`query_latency_ms`: by default the sources' FLIP-33 event-time lag; Flink's latency
markers where enabled) is read on the same grid and optional the same way: the latency objective learns
its model's correction from it, and without it the plan keeps the model as it is.

The per-vertex view (the job graph from Flink's REST API, per-subtask task metrics on the same grid) is
optional in the same way: when the REST API is down or some vertex reports nothing, the Observation has
no job graph and no subtasks, a log line says why, and the analysis falls back to the job-level model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import numpy as np
import requests
import structlog
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from backends.bounded_http import BoundedSession
from backends.flinkrest import FlinkRest, GraphUnavailable
from backends.promql import (
    BadAnswer,
    newest_sample_s,
    parse_instant,
    parse_matrix,
    parse_matrix_by,
    parse_vector,
    sample_grid,
)
from backends.vertices import subtask_series
from config.backends import PrometheusConfig
from config.schema import FLINK_MAX_PARALLELISM
from memory.signals import hit_rate
from messages.types import JobGraph, Observation, OperatorState, SubtaskSeries, WorkerSeries


class QueryClient(Protocol):
    """The two calls of the Prometheus HTTP API the source needs (answers: the JSON `data.result`)."""

    def range(self, query: str, start_s: float, end_s: float, step_s: float) -> object: ...

    def instant(self, query: str, time_s: float) -> object: ...


class PrometheusClient:
    """prometheus-api-client with the configured auth, TLS, timeout and retries."""

    def __init__(self, config: PrometheusConfig) -> None:
        self.config = config
        session = BoundedSession()
        session.verify = config.tls_ca_file or not config.tls_insecure_skip_verify
        if config.tls_client_cert_file:
            session.cert = (
                (config.tls_client_cert_file, config.tls_client_key_file)
                if config.tls_client_key_file
                else config.tls_client_cert_file
            )
        retry = Retry(
            total=config.retries,
            connect=config.retries,
            read=0,  # a slow server stays slow: do not wait for it twice
            backoff_factor=0.2,
            status_forcelist=(429, 500, 502, 503, 504),
            allowed_methods=("GET",),
            raise_on_status=False,
            # a Retry-After header would be slept on whole (urllib3 caps it at 6 h), past every timeout and
            # deaf to SIGTERM: the doubling back-off from 0.2 s bounds the wait instead
            respect_retry_after_header=False,
        )
        self.connection = PrometheusConnect(
            url=config.url.rstrip("/"),
            session=session,
            retry=retry,
            timeout=config.timeout_s,
            auth=self._basic_auth(),
        )

    def _basic_auth(self) -> tuple[str, str] | None:
        if self.config.basic_auth_username is None:
            return None
        password = Path(self.config.basic_auth_password_file).read_text().strip()
        return self.config.basic_auth_username, password

    def _headers(self) -> dict[str, str] | None:
        """Re-read the token each time: service-account tokens are rotated on disk."""
        if self.config.bearer_token_file is None:
            return None
        token = Path(self.config.bearer_token_file).read_text().strip()
        return {"Authorization": f"Bearer {token}"}

    def range(self, query: str, start_s: float, end_s: float, step_s: float) -> object:
        self.connection.headers = self._headers()
        return self.connection.custom_query_range(
            # seconds as a number: Prometheus reads "2.5s" as no duration (a duration's units are whole)
            query,
            _utc(start_s),
            _utc(end_s),
            step=f"{step_s:g}",
            timeout=self.config.timeout_s,
        )

    def instant(self, query: str, time_s: float) -> object:
        self.connection.headers = self._headers()
        return self.connection.custom_query(
            query, params={"time": f"{time_s:.3f}"}, timeout=self.config.timeout_s
        )

    def ping(self) -> None:
        """Raise unless Prometheus answers a trivial query (for `check-config`)."""
        self.instant("1", datetime.now(UTC).timestamp())


def _window_literal(window_s: float) -> str:
    """The loop window as a PromQL range (what `$window` in a query becomes), at least one second."""
    return f"{max(round(window_s), 1)}s"


REQUIRED_QUERIES = (
    "query_freshness",
    "query_input_rate",
    "query_worker_cpu",
    "query_worker_throughput",
    "query_backlog",
    "query_parallelism",
    "query_uptime",
    "query_restarts",
)
"""The queries without whose answer the loop holds (`observe` names their absence a problem); every other
one is optional: the loop runs without it, on less knowledge."""


def probe_queries(
    client: QueryClient, config: PrometheusConfig, window_s: float, now_s: float
) -> list[tuple[str, bool, str | None]]:
    """Each configured query once, at `now_s`: (its field, required, None or why it gives nothing), so that
    `check-config` names a query that finds no series before the loop holds on it (or runs without it)."""
    probes = []
    for name in type(config).model_fields:
        query = getattr(config, name)
        if not name.startswith("query_") or not query:
            continue
        try:
            answer = client.instant(query.replace("$window", _window_literal(window_s)), now_s)
            why = None if answer else "no series now (is the job running and scraped, are the names right?)"
        except Exception as error:
            why = f"{type(error).__name__}: {_short(error)}"
        probes.append((name, name in REQUIRED_QUERIES, why))
    return probes


@dataclass
class _Reading:
    """Answers gathered during one observation, and what went wrong."""

    problems: list[str] = field(default_factory=list)
    unreachable: str | None = None

    def run(self, name: str, call: Callable[[], object]) -> object | None:
        if self.unreachable is not None:
            self.problems.append(f"{name}: not queried ({self.unreachable})")
            return None
        try:
            return call()
        except (requests.ConnectionError, requests.Timeout) as error:
            slow = isinstance(error, requests.Timeout) or "ReadTimeoutError" in str(error)
            self.unreachable = (
                "Prometheus timed out" if slow else f"Prometheus unreachable: {type(error).__name__}"
            )
            self.problems.append(f"{name}: {self.unreachable}: {_short(error)}")
        except Exception as error:  # an error answer or a body that is not the API's JSON
            self.problems.append(f"{name}: query failed: {type(error).__name__}: {_short(error)}")
            if str(error).startswith("HTTP Status Code 429"):  # throttled after the retries: ask no more
                self.unreachable = "Prometheus throttles this client (429)"
        return None


class PrometheusMetricsSource:
    """`MetricsSource` reading Flink's metrics from Prometheus (see module docstring)."""

    def __init__(
        self,
        config: PrometheusConfig,
        client: QueryClient | None = None,
        log: structlog.typing.FilteringBoundLogger | None = None,
        rest: FlinkRest | None = None,
    ) -> None:
        self.config = config
        self.client = client or PrometheusClient(config)
        self.log = log or structlog.get_logger("foresail.prometheus")
        self.rest = rest
        """Where the job graph comes from; None = no per-vertex view."""
        self._missing: dict[str, str | None] = {}
        """Per optional signal, the reason last logged for its absence (None: logged as back)."""

    def input_rate(self, now_s: float, window_s: float) -> tuple[np.ndarray, np.ndarray]:
        """The surge signal alone (the surge watch reads it between iterations): the short-window rate,
        or the input rate where that has no samples. Raises on an unreachable Prometheus or an answer that
        is not a matrix; no series gives NaN."""
        grid = sample_grid(now_s, window_s, self.config.step_s)
        if not len(grid):
            return grid, np.array([])
        rates = np.full(len(grid), np.nan)
        for query in (self.config.query_input_rate_recent, self.config.query_input_rate):
            if query:
                answer = self.client.range(query, grid[0], grid[-1], self.config.step_s)
                rates = parse_matrix(answer, grid, self.config.step_s, None).get("", rates)
                if np.isfinite(rates).any():
                    break
        return grid, rates

    def observe(self, now_s: float, window_s: float) -> Observation:
        config, step = self.config, self.config.step_s
        grid = sample_grid(now_s, window_s, step)
        reading = _Reading()
        start_s, end_s = (grid[0], grid[-1]) if len(grid) else (now_s, now_s)

        def series(name: str, query: str, label: str | None) -> dict[str, np.ndarray]:
            answer = reading.run(name, lambda: self.client.range(query, start_s, end_s, step))
            if answer is None:
                return {}
            try:
                arrays = parse_matrix(answer, grid, step, label)
            except BadAnswer as error:
                reading.problems.append(f"{name}: unexpected answer: {error}")
                return {}
            if not arrays:
                reading.problems.append(f"{name}: no series")
            elif not any(np.isfinite(a).any() for a in arrays.values()):
                reading.problems.append(f"{name}: only gaps (NaN) in the window")
            return arrays

        def scalar(name: str, query: str) -> float | None:
            if not query:
                return None
            answer = reading.run(name, lambda: self.client.instant(query, now_s))
            if answer is None:
                return None
            try:
                value = parse_instant(answer)
            except BadAnswer as error:
                reading.problems.append(f"{name}: unexpected answer: {error}")
                return None
            if value is None:
                reading.problems.append(f"{name}: no series")
            elif math.isnan(value):
                reading.problems.append(f"{name}: NaN")
                return None
            return value

        freshness = scalar("freshness", config.query_freshness)
        input_rate = series("input_rate", config.query_input_rate, None).get("", np.full(len(grid), np.nan))
        cpu = series("worker_cpu", config.query_worker_cpu, config.worker_label)
        throughput = series("worker_throughput", config.query_worker_throughput, config.worker_label)
        self._drop_carried(reading, cpu, throughput, grid, now_s)
        backlog = scalar("backlog", config.query_backlog)
        parallelism = scalar("parallelism", config.query_parallelism)
        uptime_s = scalar("uptime", config.query_uptime)
        restarts = scalar("restarts", config.query_restarts)

        problems = reading.problems
        if freshness is not None and freshness > config.stale_after_s:
            problems.append(
                f"metrics stale: newest sample {freshness:.0f} s old > {config.stale_after_s:.0f} s"
            )
        self._check_newest(problems, "input_rate", [input_rate], grid, now_s)
        self._check_newest(problems, "worker metrics", [*cpu.values(), *throughput.values()], grid, now_s)
        for name, value in (("backlog", backlog), ("uptime", uptime_s), ("restarts", restarts)):
            if value is not None and value < 0:
                problems.append(f"{name}: negative ({value})")
        workers = _workers(grid, cpu, throughput, problems)
        operators, managed_mb = self._state(now_s, window_s, reading.unreachable)
        job_graph, subtasks = self._per_vertex(grid, reading.unreachable)
        latency_ms = self._latency(grid, reading.unreachable)
        recent_rate = self._recent_rate(grid, reading.unreachable)
        return Observation(
            time_s=float(now_s),
            window_s=float(window_s),
            input_timestamps_s=grid,
            input_rate_rps=input_rate,
            workers=workers,
            backlog_records=backlog if backlog is not None and backlog >= 0 else None,
            parallelism=_count(parallelism, problems),
            uptime_s=uptime_s if uptime_s is not None and uptime_s >= 0 else None,
            restarts=int(restarts) if restarts is not None and restarts >= 0 else None,
            problems=tuple(problems),
            operators=operators,
            managed_memory_mb=managed_mb,
            job_graph=job_graph,
            subtasks=subtasks,
            latency_ms=latency_ms,
            recent_input_rate_rps=recent_rate,
        )

    def _optional_range(self, name: str, query: str, grid: np.ndarray) -> tuple[object | None, str]:
        """One range query of an optional signal over the grid: its answer (None when it failed) and why."""
        reading = _Reading()
        step = self.config.step_s
        answer = reading.run(name, lambda: self.client.range(query, grid[0], grid[-1], step))
        return answer, "; ".join(reading.problems)

    def _recent_rate(self, grid: np.ndarray, unreachable: str | None) -> np.ndarray | None:
        """The short-window input rate on the grid; None, logged once, when it is not configured or has no
        sample (a scrape interval too long for its window): surges are then judged on the input rate."""
        query = self.config.query_input_rate_recent
        if not query or unreachable is not None or not len(grid):
            return None
        answer, why = self._optional_range("recent_input_rate", query, grid)
        if answer is not None:
            try:
                rates = parse_matrix(answer, grid, self.config.step_s, None).get("")
            except BadAnswer as error:
                rates, why = None, f"unexpected answer: {error}"
            if rates is not None and np.isfinite(rates).any():
                self._say("recent-input-rate", None)
                return np.where(rates >= 0, rates, np.nan)
        self._say("recent-input-rate", why or "no samples", query=query)
        return None

    def _latency(self, grid: np.ndarray, unreachable: str | None) -> np.ndarray | None:
        """The job's latency in ms on the grid (the highest series where the query gives several); None,
        logged once, when it is not configured, not reported, or not plausible (negative)."""
        query = self.config.query_latency_ms
        if not query or unreachable is not None or not len(grid):
            return None
        answer, why = self._optional_range("latency", query, grid)
        step = self.config.step_s
        arrays: list[np.ndarray] = []
        if answer is not None:
            try:  # series one by one: latencies are not added up
                series = answer if isinstance(answer, list) else [answer]
                arrays = [parse_matrix([one], grid, step, None)[""] for one in series]
            except BadAnswer as error:
                why = f"unexpected answer: {error}"
        if arrays:
            latency = np.fmax.reduce(arrays)
            if not np.isfinite(latency).any():
                why = "only gaps (NaN) in the window"
            elif np.nanmin(latency) < 0:
                why = f"negative ({np.nanmin(latency):.0f} ms)"
            else:
                self._say("latency", None)
                return latency
        self._say("latency", why or "no series", query=self.config.query_latency_ms)
        return None

    def _drop_carried(
        self,
        reading: _Reading,
        cpu: dict[str, np.ndarray],
        throughput: dict[str, np.ndarray],
        grid: np.ndarray,
        now_s: float,
    ) -> None:
        """Turns the points of each worker that lie more than `stale_after_s` past its newest scraped
        sample into gaps (in place): they are Prometheus's lookback copies, not measurements."""
        query = self.config.query_worker_freshness
        if not query or not (cpu or throughput):
            return
        answer = reading.run("worker_freshness", lambda: self.client.instant(query, now_s))
        if answer is None:
            return
        try:
            ages_s = parse_vector(answer, self.config.worker_label)
        except BadAnswer as error:
            reading.problems.append(f"worker_freshness: unexpected answer: {error}")
            return
        for worker, age_s in ages_s.items():
            if not math.isfinite(age_s):
                continue
            carried = grid > now_s - age_s + self.config.stale_after_s
            for arrays in (cpu, throughput):
                if worker in arrays:
                    arrays[worker] = np.where(carried, np.nan, arrays[worker])

    def _per_vertex(
        self, grid: np.ndarray, unreachable: str | None
    ) -> tuple[JobGraph | None, tuple[SubtaskSeries, ...]]:
        """The job graph and its live subtasks' task metrics; (None, ()) and a log line when either is
        missing (never a problem: the job-level model still decides)."""
        graph, subtasks, why = None, (), None
        config = self.config
        queries = {
            "records_in_rps": config.query_subtask_records_in_rps,
            "records_out_rps": config.query_subtask_records_out_rps,
            "busy_ms_per_s": config.query_subtask_busy_ms,
            "backpressured_ms_per_s": config.query_subtask_backpressured_ms,
            "idle_ms_per_s": config.query_subtask_idle_ms,
        }
        if self.rest is None or not all(queries.values()):
            why = "not configured (no Flink REST URL or an empty per-subtask query)"
        elif unreachable is not None or not len(grid):
            why = unreachable or "empty window"
        else:
            try:
                graph = self.rest.job_graph()
            except GraphUnavailable as error:
                why = f"job graph: {error}"
        if graph is not None:
            labels = (config.vertex_label, config.subtask_label, config.worker_label)
            reading = _Reading()
            metrics = {}
            for name, query in queries.items():
                answer = reading.run(
                    name, lambda q=query: self.client.range(q, grid[0], grid[-1], config.step_s)
                )
                try:
                    metrics[name] = (
                        {} if answer is None else parse_matrix_by(answer, grid, config.step_s, labels)
                    )
                except BadAnswer as error:
                    reading.problems.append(f"{name}: unexpected answer: {error}")
                if reading.problems:
                    why = "; ".join(reading.problems)
                    break
            else:
                subtasks, why = subtask_series(graph, grid, metrics)
        self._say("per-vertex", why, fallback="job-level model")
        return (graph, subtasks) if why is None else (None, ())

    def _say(self, signal: str, why: str | None, **context: str) -> None:
        """One line when an optional signal goes missing (or the reason changes), one when it is back."""
        last = self._missing.get(signal, "")  # "": nothing logged yet
        if why == last:
            return
        missing, back, level = _SIGNAL_EVENTS[signal]
        if why is not None:
            getattr(self.log, level)(missing, reason=why, **context)
        elif last:
            self.log.info(back)
        self._missing[signal] = why

    def _state(
        self, now_s: float, window_s: float, unreachable: str | None
    ) -> tuple[tuple[OperatorState, ...], float | None]:
        """Per-operator state signals and the managed memory per slot; () and None when unknown."""
        config = self.config
        reading = _Reading(unreachable=unreachable)
        window = _window_literal(window_s)

        def vector(name: str, query: str) -> dict[str, float]:
            if not query:
                return {}
            query = query.replace("$window", window)
            answer = reading.run(name, lambda: self.client.instant(query, now_s))
            if answer is None:
                return {}
            try:
                return parse_vector(answer, config.operator_label)
            except BadAnswer as error:
                reading.problems.append(f"{name}: unexpected answer: {error}")
                return {}

        names = vector("operators", config.query_operators)
        stateful = vector("state_operators", config.query_state_operators)
        hits = vector("state_cache_hits", config.query_state_cache_hits)
        misses = vector("state_cache_misses", config.query_state_cache_misses)
        latency = vector("state_latency", config.query_state_latency_ns)
        used = vector("state_memory_used", config.query_state_memory_used_mb)
        managed_mb = None
        if config.query_managed_memory_mb:
            answer = reading.run(
                "managed_memory", lambda: self.client.instant(config.query_managed_memory_mb, now_s)
            )
            try:
                value = parse_instant(answer) if answer is not None else None
            except BadAnswer as error:
                reading.problems.append(f"managed_memory: unexpected answer: {error}")
                value = None
            managed_mb = value if value is not None and math.isfinite(value) and value >= 0 else None
        if reading.problems and unreachable is None:
            self.log.warning("memory-signals-incomplete", problems=reading.problems)
        operators = []
        for name in sorted(set(names) | set(stateful) | set(hits) | set(misses)):
            is_stateful = name in stateful or name in hits or name in misses or name in latency
            reads = hits.get(name, math.nan) + misses.get(name, math.nan)
            operators.append(
                OperatorState(
                    name,
                    stateful=is_stateful,
                    cache_hit_rate=hit_rate(hits.get(name, math.nan), misses.get(name, math.nan)),
                    state_reads_rps=reads,
                    state_latency_ns=latency.get(name, math.nan),
                    managed_memory_used_mb=used.get(name, math.nan),
                )
            )
        return tuple(operators), managed_mb

    def _check_newest(
        self, problems: list[str], name: str, arrays: list[np.ndarray], grid: np.ndarray, now_s: float
    ) -> None:
        newest = newest_sample_s(arrays, grid)
        if newest is not None and now_s - newest > self.config.stale_after_s:
            problems.append(f"{name}: stale (newest sample {now_s - newest:.0f} s old)")


_SIGNAL_EVENTS = {
    "per-vertex": ("per-vertex-metrics-missing", "per-vertex-metrics-back", "warning"),
    "latency": ("latency-not-read", "latency-back", "info"),
    "recent-input-rate": ("recent-input-rate-not-read", "recent-input-rate-back", "info"),
}
"""An optional signal's log events when it goes missing and comes back, and the level of the first."""


def _workers(
    grid: np.ndarray, cpu: dict[str, np.ndarray], throughput: dict[str, np.ndarray], problems: list[str]
) -> tuple[WorkerSeries, ...]:
    """One series per worker seen by either query; a worker missing from one of them is a problem (it
    is starting or leaving: its numbers do not describe the job's steady state)."""
    missing = np.full(len(grid), np.nan)
    workers = []
    for worker_id in sorted(set(cpu) | set(throughput)):
        for name, arrays in (("cpu", cpu), ("throughput", throughput)):
            if worker_id not in arrays and arrays:
                problems.append(f"worker {worker_id}: no {name} series")
        cpu_values = cpu.get(worker_id, missing)
        throughput_values = throughput.get(worker_id, missing)
        if (np.nan_to_num(cpu_values) < 0).any() or (np.nan_to_num(throughput_values) < 0).any():
            problems.append(f"worker {worker_id}: negative samples")
        workers.append(WorkerSeries(worker_id, grid, cpu_values, throughput_values))
    return tuple(workers)


def _count(value: float | None, problems: list[str]) -> int | None:
    if value is None:
        return None
    if not 1 <= value <= FLINK_MAX_PARALLELISM or abs(value - round(value)) > 1e-6:
        problems.append(f"parallelism: not a whole number in 1..{FLINK_MAX_PARALLELISM} ({value:.6g})")
        return None
    return round(value)


def _utc(time_s: float) -> datetime:
    return datetime.fromtimestamp(time_s, UTC)


def _short(error: BaseException) -> str:
    text = str(error).replace("\n", " ")
    return text if len(text) <= 200 else text[:197] + "..."
