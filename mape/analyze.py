"""Analyze: turn an Observation into an Assessment, learning on the way.

Capacity per scale-out (capacity model), the workload forecast (forecaster), the predicted recovery time
of every candidate (recovery prediction with the learned downtimes), and the observed recovery of past
rescales (handed to the recovery monitor, which runs off the loop).

Extensions (mape/extensions.py) may choose the capacity model of a window, refine the capacity estimate
and add to the Assessment: the memory-aware analysis (memory/analysis.py) plugs in so.
"""

from __future__ import annotations

import math

import numpy as np

from capacity.model import valid_windows
from capacity.rows import RowGroups, stacked
from mape import plausibility
from mape.extensions import AnalysisExtension
from mape.knowledge import Knowledge
from mape.recent_load import expected_upper_rps, observed_recent_rps
from mape.vertex_analysis import analyse_vertices, job_level_only, with_needed_parallelism
from messages.types import Assessment, Observation, WorkerSeries
from recovery.downtime import direction_of, replays
from recovery.predict import predict_restarts, replay_records


class Analyzer:
    """Capacity per scale-out and the workload summary the plan needs.

    The job counts as saturated when its backlog exceeds `saturated_backlog_s` seconds of its throughput:
    it then processes as fast as it can, so its throughput is its capacity.
    """

    def __init__(
        self,
        max_scaleout: int,
        saturated_backlog_s: float,
        checkpoint_interval_s: float,
        forecasting: bool = True,
        extensions: tuple[AnalysisExtension, ...] = (),
        capacity_model: str = "dag",
        lag_slo_s: float | None = None,
        scale_out_at_checkpoint: bool = False,
        loop_interval_s: float = 60.0,
    ) -> None:
        self.max_scaleout = max_scaleout
        self.loop_interval_s = loop_interval_s
        """How much time one iteration's learning stands for (the cores line forgets by it)."""
        self.lag_slo_s = lag_slo_s
        self.scale_out_at_checkpoint = scale_out_at_checkpoint
        """Flink >= 2.0 (FLIP-461): a scale-out restarts from a checkpoint that just completed, no replay."""
        self.extensions = extensions
        self.capacity_model = capacity_model
        """'dag': bound the job-level capacities by the per-vertex true rates where task metrics exist."""
        self.saturated_backlog_s = saturated_backlog_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.forecasting = forecasting
        """False for policies that read neither forecast nor predicted recovery nor capacity (the
        baselines): both are skipped, which spares their cost, and an unknown capacity does not hold them."""

    def assess(self, observation: Observation, knowledge: Knowledge) -> Assessment:
        if knowledge.seeded_for is not None and observation.job_graph is not None:
            knowledge.check_seeded_job(observation.job_graph)
        problems = list(observation.problems)
        implausible = plausibility.check(observation, knowledge.plausibility)
        problems.extend(map(str, implausible))
        rates = observation.input_rate_rps[np.isfinite(observation.input_rate_rps)]
        if len(rates) == 0:
            problems.append("no input-rate samples in the window")
        backlog = observation.backlog_records
        if backlog is None or not math.isfinite(backlog) or backlog < 0:
            problems.append(f"backlog unknown ({backlog})")
            backlog = math.nan
        current = observation.parallelism
        if current is None or current < 1:
            problems.append(f"parallelism unknown ({current})")
            current = knowledge.last_target_scaleout or 1
        # Never learn from data that cannot be true, nor from a window without an uptime (a restart's
        # warm-up could not be cut) or a parallelism (its samples would be filed under a guess): the
        # knowledge keeps what is learned, and later plans size on it.
        learn = not implausible and observation.uptime_s is not None and current == observation.parallelism

        capacity = knowledge.capacity
        for extension in self.extensions:  # every one learns from the window; the first model wins
            model = extension.capacity_model(observation, knowledge, current)
            if model is not None and capacity is knowledge.capacity:
                capacity = model
        windows = valid_windows(  # a CPU sample the plausibility check would call out of range: a gap
            observation.workers,
            observation.uptime_s,
            observation.time_s,
            capacity.settings.warmup_s,
            plausibility.CPU_HEADROOM,
        )
        throughput_rps = sum(w.throughput_mean_rps for w in windows)
        saturated = bool(windows) and backlog >= self.saturated_backlog_s * throughput_rps
        if learn:
            capacity.learn(windows, observation.time_s, current, saturated)
        estimate = capacity.estimate(windows, current, self.max_scaleout, observation.time_s, saturated)
        for extension in self.extensions:
            estimate = extension.refine_estimate(knowledge, windows, current, estimate)
        capacities_rps, capacity_sources = estimate.per_scaleout_rps, estimate.sources
        if self.capacity_model == "dag":
            view = analyse_vertices(
                observation,
                knowledge.dag,
                knowledge.cores,
                capacities_rps,
                capacity_sources,
                current,
                self.max_scaleout,
                {w.worker_id: w.cpu_mean for w in windows},
                saturated or bool(implausible),
                self.loop_interval_s,
                learn,
            )
        else:
            view = job_level_only(capacities_rps, capacity_sources, "capacity.model: job")
        capacities_rps, capacity_sources = view.capacities_rps, view.sources
        if current not in capacities_rps and self.forecasting:  # a baseline's plan reads no capacity
            problems.append("no capacity known for the current scale-out yet")
        knowledge.track_record.observe(
            observation.time_s, current, capacities_rps, not problems and bool(windows)
        )

        knowledge.recovery.submit(
            observation.input_timestamps_s,
            observation.input_rate_rps,
            _total_throughput(observation),
            learn=not implausible,  # a glitch must not widen the normal band
        )
        knowledge.recovery.expire(observation.time_s)
        self._learn_recoveries(knowledge)
        forecast, recovery_s, lag_catch_up_s = None, {}, {}
        recent, latest = observed_recent_rps(observation)
        expected_upper = math.nan
        if self.forecasting:
            expected_upper = expected_upper_rps(knowledge.forecaster.last_forecast, observation.time_s)
            knowledge.forecaster.observe(
                observation.input_timestamps_s, observation.input_rate_rps, now_s=observation.time_s
            )
            forecast = knowledge.forecaster.forecast(observation.time_s)
            recovery_s, lag_catch_up_s = self._recovery_per_candidate(
                observation, capacities_rps, forecast.planned_rps, backlog, current, knowledge
            )
        vertices = view.vertices
        if vertices and len(rates):  # DS2's walk from the forecast peak (without a forecast: the window's)
            peak_rps = float(np.max(forecast.planned_rps)) if forecast is not None else float(rates.max())
            vertices = with_needed_parallelism(
                vertices, observation, knowledge.dag, peak_rps, self.max_scaleout
            )

        assessment = Assessment(
            time_s=observation.time_s,
            current_scaleout=current,
            workload_avg_rps=float(rates.mean()) if len(rates) else math.nan,
            workload_max_rps=float(rates.max()) if len(rates) else math.nan,
            backlog_records=float(backlog),
            capacities_rps=capacities_rps,
            capacity_sources=capacity_sources,
            capacity_method=estimate.method,
            forecast_rps=forecast.planned_rps if forecast else None,
            forecast_model=forecast.model if forecast else "",
            forecast_reason=forecast.reason if forecast else "",
            forecast_wape=forecast.last_wape if forecast else None,
            recovery_s=recovery_s,
            lag_catch_up_s=lag_catch_up_s,
            warming_up=not windows,
            problems=tuple(problems),
            cpu_utilization=float(np.mean([w.cpu_mean for w in windows])) if windows else math.nan,
            capacity_model=view.model,
            capacity_model_reason=view.reason,
            bottleneck_vertex=view.bottleneck,
            vertices=vertices,
            forecast_upper_rps=forecast.upper_rps if forecast else None,
            workload_recent_rps=recent,
            workload_latest_rps=latest,
            expected_upper_rps=expected_upper,
            capacity_overestimate=knowledge.track_record.overestimate(),
            **_worker_rates(observation, capacity.settings.warmup_s),
        )
        for extension in self.extensions:
            assessment = extension.refine(observation, knowledge, assessment)
        return assessment

    def _recovery_per_candidate(
        self,
        observation: Observation,
        capacities_rps: dict[int, float],
        forecast_rps: np.ndarray,
        backlog_records: float,
        current: int,
        knowledge: Knowledge,
    ) -> tuple[dict[int, float], dict[int, float]]:
        """Per candidate scale-out (the current one: a failure), the predicted recovery (s) of a restart
        there and, with a lag SLO, the seconds its lag stays over the SLO after the resume."""
        rates = per_second(observation.input_timestamps_s, observation.input_rate_rps, observation.time_s)
        replay = replay_records(rates, self.checkpoint_interval_s)
        recovery_s: dict[int, float] = {}
        lag_catch_up_s: dict[int, float] = {}
        for direction in ("out", "in"):
            group = {n: c for n, c in capacities_rps.items() if direction_of(current, n) == direction}
            if group:
                recovery, lag = predict_restarts(
                    group,
                    forecast_rps,
                    backlog_records,
                    replay if replays(direction, self.scale_out_at_checkpoint) else 0.0,
                    knowledge.downtime.estimate(direction),
                    self.lag_slo_s,
                )
                recovery_s |= recovery
                lag_catch_up_s |= lag
        return recovery_s, lag_catch_up_s

    @staticmethod
    def _learn_recoveries(knowledge: Knowledge) -> None:
        """Observed recoveries finished off the loop: their downtimes teach the downtime model."""
        for observed in knowledge.recovery.poll():
            knowledge.downtime.observe(observed.direction, observed.downtime_s)
            knowledge.new_recoveries.append(observed)


def _worker_rates(observation: Observation, warmup_s: float) -> dict[str, tuple[float, ...]]:
    """Per worker, mean throughput and busy ratio over the samples past the warm-up (DS2's and the Flink
    operator's inputs); workers without such samples are left out. Workers whose series have one length
    are summarised together (capacity/rows.py), with the same result."""
    uptime_s = observation.uptime_s
    started_s = (
        observation.time_s - uptime_s if uptime_s is not None and math.isfinite(uptime_s) else -math.inf
    )
    workers = observation.workers
    timestamps = stacked([w.timestamps_s for w in workers])
    if timestamps is None:
        rates = [_worker_rate(w, started_s + warmup_s) for w in workers]
        kept = [r for r in rates if r is not None]
        return {
            "worker_throughput_rps": tuple(t for t, _ in kept),
            "worker_busy_ratio": tuple(b for _, b in kept),
        }
    throughput = stacked([w.throughput_rps for w in workers])
    keep = np.isfinite(throughput) & (timestamps >= started_s + warmup_s)
    rows = RowGroups(keep)
    nan_row = np.full(timestamps.shape[1], np.nan)
    busy = stacked([nan_row if w.busy_ratio is None else w.busy_ratio for w in workers])
    busy_means = np.where((np.isfinite(busy) | ~keep).all(axis=1), rows.means(busy), np.nan)
    reported = rows.counts > 0
    return {
        "worker_throughput_rps": tuple(rows.means(throughput)[reported].tolist()),
        "worker_busy_ratio": tuple(busy_means[reported].tolist()),
    }


def _worker_rate(worker: WorkerSeries, from_s: float) -> tuple[float, float] | None:
    """One worker's mean throughput and busy ratio over its samples from `from_s` on (None without any)."""
    keep = np.isfinite(worker.throughput_rps) & (worker.timestamps_s >= from_s)
    if not keep.any():
        return None
    ratios = worker.busy_ratio[keep] if worker.busy_ratio is not None else np.array([math.nan])
    busy = float(ratios.mean()) if np.isfinite(ratios).all() else math.nan
    return float(worker.throughput_rps[keep].mean()), busy


def _total_throughput(observation: Observation) -> np.ndarray:
    """Job throughput at each input-rate timestamp; NaN where no worker reported (the job was down).

    The workers' values add up in worker order, as one running sum per timestamp."""
    stamps = observation.input_timestamps_s
    if not observation.workers:
        return np.full(len(stamps), np.nan)
    timestamps = stacked([w.timestamps_s for w in observation.workers])
    if (
        timestamps is not None
        and timestamps.shape[1] == len(stamps) > 0
        and np.all(timestamps == stamps)
        and np.all(np.diff(stamps) > 0)
    ):
        # sampled at the input rate's (increasing) timestamps: interpolation returns the samples themselves
        values = stacked([w.throughput_rps for w in observation.workers])
    else:
        values = np.array(
            [np.interp(stamps, w.timestamps_s, w.throughput_rps, np.nan, np.nan) for w in observation.workers]
        ).reshape(len(observation.workers), -1)
    reported = ~np.isnan(values)
    first = reported.argmax(axis=0)  # the first worker with a value starts the sum; later NaNs add 0
    columns = np.arange(values.shape[1])
    addends = np.nan_to_num(values)
    addends[first, columns] = values[first, columns]
    total = np.cumsum(addends, axis=0)[-1]
    return np.where(reported.any(axis=0), total, np.nan)


def per_second(timestamps_s: np.ndarray, rates_rps: np.ndarray, now_s: float) -> np.ndarray:
    """The window's input rate on a one-second grid ending at now (for the replay estimate)."""
    known = np.isfinite(rates_rps)
    if not known.any():
        return np.array([np.nan])
    seconds = np.arange(np.floor(timestamps_s[known][0]), np.floor(now_s) + 1)
    return np.interp(seconds, timestamps_s[known], rates_rps[known])
