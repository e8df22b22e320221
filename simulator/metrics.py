"""The twin seen through a metrics backend and a scaling API, as the loop would see a real cluster.

Only what Prometheus and Flink's REST API would report leaks out: smoothed per-worker CPU, Flink's 60 s
throughput meters (which restart from zero with the job), Kafka's messages-in rate and consumer lag,
sampled at the scrape step; the job graph, and per vertex and subtask Flink's task metrics over the same
60 s (records in/out per second, busy / backpressured / idle ms per second; busy NaN for a legacy source;
a subtask upstream of a saturated bottleneck spends the rest of its time backpressured, the others idle;
only samples of the current run, as the subtasks of an earlier run no longer exist); per operator, whether it keeps state, its block-cache hit rate from the increase of the cumulative
hit/miss tickers over the window, its mean state-access latency and the managed memory it holds; and the
managed memory per slot. The twin's ground truth stays behind for scoring.

At vertex granularity the job graph shows each vertex's own parallelism, only existing subtasks report,
and the per-vertex rescales that finished since the previous observation come back as `CompletedRescale`s
with their downtime. On a slot whose core binds (the job's bottleneck is CPU) a subtask waits for the
core with records queued, and Flink counts that wait as busy time, so every subtask that computes there
reads busy while the job is saturated. (Reactive mode keeps the earlier readings, whose figures the tests
pin; every slot there holds the same mix.)
"""

from __future__ import annotations

import hashlib
import math
import warnings

import numpy as np

from memory.signals import hit_rate
from messages.types import (
    CompletedRescale,
    JobEdge,
    JobGraph,
    JobVertex,
    Observation,
    OperatorState,
    SubtaskSeries,
    WorkerSeries,
)
from simulator.deployment import CPU_BOTTLENECK, JobLoad
from simulator.topology import Topology
from simulator.twin import Twin, WorkerInfo

_EPS = 1e-9


class TwinMetricsSource:
    """`MetricsSource` over a twin's recorded history. It never advances the twin: the driver does."""

    def __init__(
        self,
        twin: Twin,
        scrape_interval_s: float = 5.0,
        meter_window_s: float = 60.0,
        input_rate_window_s: float = 10.0,
        *,
        cpu_window_s: float = 60.0,
    ) -> None:
        if not scrape_interval_s > 0:
            raise ValueError(f"scrape_interval_s must be > 0, got {scrape_interval_s!r}")
        self.twin = twin
        self.scrape_interval_s = float(scrape_interval_s)
        self.meter_window_s = _whole_seconds("meter_window_s", meter_window_s)
        self.input_rate_window_s = _whole_seconds("input_rate_window_s", input_rate_window_s)
        self.cpu_window_s = _whole_seconds("cpu_window_s", cpu_window_s)
        self._vertex_ids = tuple(_vertex_id(twin.topology, v.name) for v in twin.topology.vertices)
        self._legacy = np.array([v.legacy_source for v in twin.topology.vertices])
        self._rescales_delivered = 0

    def vertex_id(self, name: str) -> str:
        return self._vertex_ids[self.twin.topology.index(name)]

    def vertex_name(self, vertex_id: str) -> str:
        return self.twin.topology.vertices[self._vertex_ids.index(vertex_id)].name

    def _completed_rescales(self, t_now: int) -> tuple[CompletedRescale, ...]:
        """Per-vertex rescales finished by now and not reported before, as the execute side measures them."""
        done = []
        for rescale in self.twin.completed_rescales[self._rescales_delivered :]:
            if rescale.finished_s > t_now:
                break
            done.append(
                CompletedRescale(
                    float(rescale.requested_s),
                    float(rescale.finished_s),
                    "vertex",
                    {self.vertex_id(name): p for name, p in rescale.vertex_parallelism.items()},
                )
            )
        self._rescales_delivered += len(done)
        return tuple(done)

    def input_rate(self, now_s: float, window_s: float) -> tuple[np.ndarray, np.ndarray]:
        """The input-rate samples `observe` would give, alone (the surge watch reads them between
        iterations)."""
        timestamps_s, ends = self._samples(now_s, window_s)
        return timestamps_s, self._input_rate(ends)

    def _samples(self, now_s: float, window_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Sample times at multiples of the scrape interval in (now_s - window_s, now_s] and the whole
        second each one ends (a sample at t sees the seconds before t)."""
        if not (math.isfinite(now_s) and now_s >= 0):
            raise ValueError(f"now_s must be a finite time >= 0, got {now_s!r}")
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        t_now = math.floor(now_s + _EPS)
        if t_now > self.twin.now_s:
            raise ValueError(
                f"cannot observe {now_s} s: the twin has only simulated up to {self.twin.now_s} s"
            )
        timestamps_s = self._sample_times(now_s, window_s)
        ends = np.floor(timestamps_s + _EPS).astype(np.int64)
        keep = ends >= 1
        return timestamps_s[keep], ends[keep]

    def observe(self, now_s: float, window_s: float) -> Observation:
        """Samples at multiples of the scrape interval in (now_s - window_s, now_s]."""
        timestamps_s, ends = self._samples(now_s, window_s)
        t_now = math.floor(now_s + _EPS)
        state = self.twin.state_at(t_now)
        workers, subtasks = self._worker_series(t_now, timestamps_s, ends)
        problems: tuple[str, ...] = ()
        if state.run_start_s is None:
            problems = ("job is restarting: workers report no metrics until it runs again",)
        return Observation(
            time_s=float(now_s),
            window_s=float(window_s),
            input_timestamps_s=timestamps_s,
            input_rate_rps=self._input_rate(ends),
            workers=workers,
            backlog_records=float(state.lag_records),
            parallelism=state.parallelism,
            uptime_s=0.0 if state.run_start_s is None else float(t_now - state.run_start_s),
            restarts=state.restarts,
            problems=problems,
            operators=self._operators(t_now, window_s),
            managed_memory_mb=state.managed_mb,
            job_graph=self._job_graph(self.twin.load_at(t_now).parallelism),
            subtasks=subtasks,
            latency_ms=self._latency_ms(ends),
            completed_rescales=self._completed_rescales(t_now),
        )

    def _latency_ms(self, ends: np.ndarray) -> np.ndarray:
        """A latency gauge at each sample: the mean latency of the records processed over the scrape step
        (while nothing is processed: the oldest waiting record's age, the source's event-time lag)."""
        step = max(1, round(self.scrape_interval_s))
        start = max(0, int(ends.min(initial=0)) - step)
        latency = mean_latency_per_second_s(self.twin, start, int(ends.max(initial=0)))
        weights = self.twin.history.view("processed")[start : start + len(latency)].astype(float)
        gauge = np.full(len(ends), np.nan)
        for i, end in enumerate(ends):
            lo, hi = max(end - step, start) - start, end - start
            values, w = latency[lo:hi], weights[lo:hi]
            known = np.isfinite(values)
            if (w[known] > 0).any():
                gauge[i] = float((values[known] * w[known]).sum() / w[known].sum())
            elif known.any():
                gauge[i] = float(values[known].max())
        return 1000.0 * gauge

    def _job_graph(self, parallelism: tuple[int, ...]) -> JobGraph:
        """The graph as Flink's REST API shows it, each vertex at the parallelism it runs."""
        topology, ids = self.twin.topology, self._vertex_ids
        vertices = tuple(
            JobVertex(vid, v.name, min(p, v.max_parallelism), v.max_parallelism)
            for vid, v, p in zip(ids, topology.vertices, parallelism, strict=True)
        )
        edges = tuple(
            JobEdge(ids[topology.index(u)], vid, v.ship)
            for vid, v in zip(ids, topology.vertices, strict=True)
            for u in v.inputs
        )
        return JobGraph(vertices, edges)

    def _operators(self, t_now: int, window_s: float) -> tuple[OperatorState, ...]:
        """The source (stateless) and the keyed operator, with its state signals over the window."""
        profile = self.twin.profile
        source = OperatorState("source", stateful=False)
        if not profile.stateful:
            return (source, OperatorState(profile.operator, stateful=False))
        history = self.twin.history
        start = max(0, t_now - math.ceil(window_s - _EPS))
        hits = float(history.view("state_hits")[start:t_now].sum())
        misses = float(history.view("state_misses")[start:t_now].sum())
        accesses = float(history.view("state_accesses")[start:t_now].sum())
        latency_sum = float(history.view("state_latency_ns_sum")[start:t_now].sum())
        return (
            source,
            OperatorState(
                profile.operator,
                stateful=True,
                cache_hit_rate=hit_rate(hits, misses),
                state_reads_rps=(hits + misses) / max(t_now - start, 1),
                state_latency_ns=latency_sum / accesses if accesses > 0 else math.nan,
                managed_memory_used_mb=self.twin.state_rates.used_mb if self.twin.running else math.nan,
            ),
        )

    def _sample_times(self, now_s: float, window_s: float) -> np.ndarray:
        step = self.scrape_interval_s
        first = math.floor((now_s - window_s) / step + _EPS) + 1
        last = math.floor(now_s / step + _EPS)
        return np.arange(first, last + 1, dtype=float) * step

    def _input_rate(self, ends: np.ndarray) -> np.ndarray:
        """Kafka messages-in rate: mean arrivals over the last input_rate_window_s (the broker never stops)."""
        cumulative = self.twin.history.arrived_before()
        starts = np.maximum(ends - self.input_rate_window_s, 0)
        return (cumulative[ends] - cumulative[starts]) / (ends - starts)

    def _worker_series(
        self, t_now: int, timestamps_s: np.ndarray, ends: np.ndarray
    ) -> tuple[tuple[WorkerSeries, ...], tuple[SubtaskSeries, ...]]:
        workers = self.twin.workers_at(t_now)
        if not workers:
            return (), ()
        if len(ends) == 0:
            empty = np.zeros(0)
            return tuple(WorkerSeries(w.worker_id, empty, empty, empty) for w in workers), ()
        history = self.twin.history
        run_start = history.view("run_start_at")[ends - 1][:, None]  # -1: the job was down in second end-1
        positions = np.array([w.position for w in workers])
        created = np.array([w.created_s for w in workers])[None, :]
        e = ends[:, None]
        base = max(0, int(ends.min()) - max(self.cpu_window_s, self.meter_window_s))
        top = int(ends.max())

        def window_sums(matrix: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
            block = np.nan_to_num(matrix[base:top], nan=0.0)
            cumulative = np.vstack((np.zeros((1, block.shape[1])), np.cumsum(block, axis=0)))
            lo = np.maximum(np.maximum(e - window, run_start), created)
            seconds = e - lo
            columns = np.arange(block.shape[1])[None, :]
            lo_index = np.clip(lo - base, 0, top - base)
            sums = cumulative[e - base, columns] - cumulative[lo_index, columns]
            valid = (run_start >= 0) & (seconds > 0)
            return np.where(valid, sums, np.nan), np.where(valid, seconds, 0)

        cpu_sums, cpu_seconds = window_sums(history.view("cpu")[:, positions], self.cpu_window_s)
        with np.errstate(invalid="ignore", divide="ignore"):
            cpu = cpu_sums / cpu_seconds
        # Flink's MeterView: count over the window / window length; the count restarts with the job.
        throughput_sums, _ = window_sums(history.view("throughput")[:, positions], self.meter_window_s)
        throughput_rps = throughput_sums / self.meter_window_s
        # Task metrics over the same window, per second of each worker's valid time: source records
        # processed and the share of seconds spent saturated (lo depends on when the pod started)
        columns = len(workers)
        processed = np.repeat(history.view("processed")[:, None].astype(float), columns, axis=1)
        saturated = np.repeat(history.view("saturated")[:, None].astype(float), columns, axis=1)
        processed_sums, seconds = window_sums(processed, self.meter_window_s)
        saturated_sums, _ = window_sums(saturated, self.meter_window_s)
        with np.errstate(invalid="ignore", divide="ignore"):
            processed_rps = processed_sums / seconds
            saturated_share = saturated_sums / seconds
        load = self.twin.load_at(t_now)
        busy = np.minimum(  # vertices × samples × workers, share of each second
            load.overhead_busy_matrix[:, None, :] + load.busy_per_record[:, None, :] * processed_rps[None],
            1.0,
        )
        if load.present is not None:
            busy = _waiting_for_cpu(load, busy, saturated_share)
        with np.errstate(invalid="ignore"), _all_nan_ok():
            worker_busy = np.nanmax(np.where(self._legacy[:, None, None], np.nan, busy), axis=0)
        worker_series = tuple(
            WorkerSeries(w.worker_id, timestamps_s, cpu[:, i], throughput_rps[:, i], worker_busy[:, i])
            for i, w in enumerate(workers)
        )
        run_now = self.twin.state_at(t_now).run_start_s
        current_run = run_start[:, 0] == (-2 if run_now is None else run_now)
        subtasks = self._subtask_series(
            load, workers, timestamps_s, current_run, processed_rps, saturated_share, busy
        )
        return worker_series, subtasks

    def _subtask_series(
        self,
        load: JobLoad,
        workers: list[WorkerInfo],
        timestamps_s: np.ndarray,
        current_run: np.ndarray,
        processed_rps: np.ndarray,
        saturated_share: np.ndarray,
        busy: np.ndarray,
    ) -> tuple[SubtaskSeries, ...]:
        """Per vertex and subtask, Flink's task metrics; samples of an earlier run are gaps."""
        topology = self.twin.topology
        ratios = np.array(topology.input_ratios)
        upstream = self._upstream_of_bottleneck(load)
        keep = current_run[:, None]
        records_in = np.where(keep, ratios[:, None, None] * load.shares[:, None, :] * processed_rps, np.nan)
        busy_ms = np.where(keep, 1000.0 * busy, np.nan)
        backpressured_ms = np.where(upstream[:, None, None], saturated_share[None] * (1000.0 - busy_ms), 0.0)
        backpressured_ms = np.where(keep, backpressured_ms, np.nan)
        idle_ms = 1000.0 - busy_ms - backpressured_ms
        busy_ms[self._legacy] = np.nan
        series = []
        for v, (vertex, parallelism) in enumerate(zip(topology.vertices, load.parallelism, strict=True)):
            for i, worker in enumerate(workers[:parallelism]):
                series.append(
                    SubtaskSeries(
                        self._vertex_ids[v],
                        i,
                        worker.worker_id,
                        timestamps_s,
                        records_in[v, :, i],
                        records_in[v, :, i] * vertex.selectivity,
                        busy_ms[v, :, i],
                        backpressured_ms[v, :, i],
                        idle_ms[v, :, i],
                    )
                )
        return tuple(series)

    def _upstream_of_bottleneck(self, load: JobLoad) -> np.ndarray:
        """Which vertices a saturated job backpressures: those upstream of the binding vertex (for a
        saturated core: of the vertex that uses most of it)."""
        topology = self.twin.topology
        bottleneck = load.bottleneck
        if bottleneck == CPU_BOTTLENECK:
            hottest = int(np.argmax(load.cpu_per_record))
            bottleneck = int(np.argmax(load.cpu_share * load.busy_per_record[:, hottest]))
        return np.array([bottleneck in topology.downstream_of(v) for v in range(len(topology.vertices))])


def _waiting_for_cpu(load: JobLoad, busy: np.ndarray, saturated_share: np.ndarray) -> np.ndarray:
    """Busy shares with CPU contention (per-vertex parallelism): on the slot whose core binds, every subtask
    that computes holds queued records while it waits for the core, which Flink counts as busy, so it reads
    busy while the job is saturated."""
    if load.bottleneck != CPU_BOTTLENECK:
        return busy
    spare = np.maximum(1.0 - load.fixed_cpu, 1e-9)
    slot = int(np.argmax(load.cpu_per_record / spare))
    waiting = load.present[:, slot] & (load.cpu_share > 0)
    busy = busy.copy()
    share = saturated_share[None, :, slot]
    busy[waiting, :, slot] = busy[waiting, :, slot] + share * (1.0 - busy[waiting, :, slot])
    return busy


def mean_latency_per_second_s(twin: Twin, start_s: int = 0, end_s: int | None = None) -> np.ndarray:
    """Per second in [start_s, end_s): the mean latency of the records processed in it (FIFO, as the
    twin's LatencyTracker counts them), else the oldest waiting record's age, else NaN (nothing to wait)."""
    history = twin.history
    end_s = history.length if end_s is None else min(end_s, history.length)
    t = np.arange(start_s, end_s)
    if not len(t):
        return np.zeros(0)
    cumulative = history.arrived_before()[: end_s + 1]  # records that arrived before each second
    processed = history.view("processed")[start_s:end_s].astype(np.int64)
    first = cumulative[t] - history.view("lag_at")[start_s:end_s]
    # Σ arrival second over the records from the oldest one read here on: only differences of it are
    # used, so it is summed from that record's second, not from the trace's start
    oldest_s = max(0, int(np.searchsorted(cumulative, first.min(), side="right") - 1))
    seconds = np.arange(oldest_s, end_s)
    weighted = np.concatenate(([0], np.cumsum(seconds * history.view("arrivals")[oldest_s:end_s])))

    def arrival_second_sum(offset: np.ndarray) -> np.ndarray:
        s = np.maximum(np.searchsorted(cumulative, offset, side="right") - 1, oldest_s)
        return weighted[s - oldest_s] + s * (offset - cumulative[s])

    base = twin.latency.base_latency_s
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_arrival = (arrival_second_sum(first + processed) - arrival_second_sum(first)) / processed
    latency = np.where(processed > 0, t - mean_arrival + base, np.nan)
    worst = history.view("worst_latency_s")[start_s:end_s]
    return np.where((processed == 0) & (worst > 0), worst, latency)


class TwinScalingTarget:
    """`ScalingTarget` that rescales the twin (which restarts the job, like reactive mode); at vertex
    granularity also a `VertexScalingTarget` (vertex ids as the metrics source names them)."""

    def __init__(self, twin: Twin, source: TwinMetricsSource | None = None) -> None:
        self.twin = twin
        self.source = source or TwinMetricsSource(twin)

    def scale_to(self, scaleout: int, now_s: float) -> None:
        self.twin.scale_to(scaleout, now_s)

    def scale_vertices(self, vertex_parallelism, taskmanagers: int, now_s: float) -> None:
        """Every vertex at its parallelism; the twin runs max parallelism TaskManagers (one slot each)."""
        by_name = {self.source.vertex_name(vid): int(p) for vid, p in vertex_parallelism.items()}
        self.twin.scale_vertices(by_name, now_s)

    def reconfigure(self, scaleout: int, managed_mb: float, now_s: float) -> None:
        self.twin.reconfigure(scaleout, managed_mb, now_s)


def _whole_seconds(name: str, value: float) -> int:
    if not (value >= 1 and float(value).is_integer()):
        raise ValueError(
            f"{name} must be a whole number of seconds >= 1 (the twin's resolution), got {value!r}"
        )
    return int(value)


def _vertex_id(topology: Topology, name: str) -> str:
    """A stable 32-hex vertex id, as Flink's JobVertexID looks (the loop must not rely on names)."""
    return hashlib.md5(f"{topology.name}/{name}".encode(), usedforsecurity=False).hexdigest()


class _all_nan_ok(warnings.catch_warnings):
    """nanmax over an all-NaN column (every vertex a legacy source, or a gap) is NaN, without a warning."""

    def __enter__(self):
        super().__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)
