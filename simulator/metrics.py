"""The twin seen through a metrics backend and a scaling API, as the loop would see a real cluster.

Only what Prometheus would report leaks out: smoothed per-worker CPU, Flink's 60 s throughput meters
(which restart from zero with the job), Kafka's messages-in rate and consumer lag, sampled at the scrape
step; per operator, whether it keeps state, its block-cache hit rate from the increase of the cumulative
hit/miss tickers over the window, its mean state-access latency and the managed memory it holds; and the
managed memory per slot. The twin's ground truth stays behind for scoring.
"""

from __future__ import annotations

import math

import numpy as np

from mape.types import Observation, OperatorState, WorkerSeries
from memory.signals import hit_rate
from simulator.twin import Twin

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
        self._capacity_by_worker: dict[str, float] = {}  # a pod's speed is fixed for its life
        self._capacity_config: tuple[int, float] | None = None  # (parallelism, memory) they were read at

    def observe(self, now_s: float, window_s: float) -> Observation:
        """Samples at multiples of the scrape interval in (now_s - window_s, now_s]."""
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
        ends = np.floor(timestamps_s + _EPS).astype(np.int64)  # a sample at t sees seconds < t
        keep = ends >= 1
        timestamps_s, ends = timestamps_s[keep], ends[keep]

        state = self.twin.state_at(t_now)
        workers = self._worker_series(t_now, timestamps_s, ends)
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
        )

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
        arrivals = self.twin.history.view("arrivals")
        cumulative = np.concatenate(([0], np.cumsum(arrivals[: int(ends.max(initial=0))])))
        starts = np.maximum(ends - self.input_rate_window_s, 0)
        return (cumulative[ends] - cumulative[starts]) / (ends - starts)

    def _worker_series(
        self, t_now: int, timestamps_s: np.ndarray, ends: np.ndarray
    ) -> tuple[WorkerSeries, ...]:
        workers = self.twin.workers_at(t_now)
        if not workers:
            return ()
        if len(ends) == 0:
            empty = np.zeros(0)
            return tuple(WorkerSeries(w.worker_id, empty, empty, empty) for w in workers)
        history = self.twin.history
        run_start = history.view("run_start_at")[ends - 1][:, None]  # -1: the job was down in second end-1
        positions = np.array([w.position for w in workers])
        created = np.array([w.created_s for w in workers])[None, :]
        e = ends[:, None]
        base = max(0, int(ends.min()) - max(self.cpu_window_s, self.meter_window_s))
        top = int(ends.max())

        def window_sums(matrix: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
            block = np.nan_to_num(matrix[base:top, positions], nan=0.0)
            cumulative = np.vstack((np.zeros((1, len(positions))), np.cumsum(block, axis=0)))
            lo = np.maximum(np.maximum(e - window, run_start), created)
            seconds = e - lo
            columns = np.arange(len(positions))[None, :]
            lo_index = np.clip(lo - base, 0, top - base)
            sums = cumulative[e - base, columns] - cumulative[lo_index, columns]
            valid = (run_start >= 0) & (seconds > 0)
            return np.where(valid, sums, np.nan), np.where(valid, seconds, 0)

        cpu_sums, cpu_seconds = window_sums(history.view("cpu"), self.cpu_window_s)
        with np.errstate(invalid="ignore", divide="ignore"):
            cpu = cpu_sums / cpu_seconds
        # Flink's MeterView: count over the window / window length; the count restarts with the job.
        throughput_sums, throughput_seconds = window_sums(history.view("throughput"), self.meter_window_s)
        throughput_rps = throughput_sums / self.meter_window_s
        # busyTimeMsPerSecond / 1000: the share of the valid seconds a worker spent processing, i.e. its
        # records per second over what it could process (exact in the twin, where work is records / capacity)
        capacities = np.array([self._capacity_rps(w.worker_id) for w in workers])[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            busy_ratio = np.clip(throughput_sums / throughput_seconds / capacities, 0.0, 1.0)
        return tuple(
            WorkerSeries(w.worker_id, timestamps_s, cpu[:, i], throughput_rps[:, i], busy_ratio[:, i])
            for i, w in enumerate(workers)
        )

    def _capacity_rps(self, worker_id: str) -> float:
        """Saturation records/s of a worker, remembered from when it was deployed (NaN if never seen)."""
        config = (self.twin.parallelism, self.twin.managed_mb)  # a stateful worker's capacity depends on both
        if worker_id not in self._capacity_by_worker or config != self._capacity_config:
            current = zip(self.twin.worker_ids, self.twin.worker_capacities_rps(), strict=True)
            self._capacity_by_worker.update((w, float(c)) for w, c in current)
            self._capacity_config = config
        return self._capacity_by_worker.get(worker_id, math.nan)


class TwinScalingTarget:
    """`ScalingTarget` that rescales the twin (which restarts the job, like reactive mode)."""

    def __init__(self, twin: Twin) -> None:
        self.twin = twin

    def scale_to(self, scaleout: int, now_s: float) -> None:
        self.twin.scale_to(scaleout, now_s)

    def reconfigure(self, scaleout: int, managed_mb: float, now_s: float) -> None:
        self.twin.reconfigure(scaleout, managed_mb, now_s)


def _whole_seconds(name: str, value: float) -> int:
    if not (value >= 1 and float(value).is_integer()):
        raise ValueError(
            f"{name} must be a whole number of seconds >= 1 (the twin's resolution), got {value!r}"
        )
    return int(value)
