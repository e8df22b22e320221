"""Analyze: turn an Observation into an Assessment, learning on the way.

Capacity per scale-out (capacity model), the workload forecast (forecaster), the predicted recovery time
of every candidate (recovery prediction with the learned downtimes), and the observed recovery of past
rescales (handed to the recovery monitor, which runs off the loop).

Memory-aware analysis (given `memory_levels`): a stateful job learns capacity per memory level (one model
per level; per level and scale-out for an operator that reads through the block cache, whose unseen
configurations come from the cache curve, memory/curve.py), and the Assessment carries the other known
levels' capacities and recoveries. A stateless job, or one whose memory cannot be told, is analysed
exactly as without memory levels.
"""

from __future__ import annotations

import math

import numpy as np

from capacity.model import valid_windows
from mape.knowledge import Knowledge
from mape.types import Assessment, MemoryAssessment, Observation
from memory.curve import capacities_at, observed_curve
from memory.levels import MemoryLevels
from recovery.downtime import direction_of
from recovery.predict import predict_recovery_s, replay_records


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
        memory_levels: MemoryLevels | None = None,
    ) -> None:
        self.max_scaleout = max_scaleout
        self.memory_levels = memory_levels
        self.saturated_backlog_s = saturated_backlog_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.forecasting = forecasting
        """False for policies that read neither forecast nor predicted recovery (the baselines): both are
        skipped, which spares their cost."""

    def assess(self, observation: Observation, knowledge: Knowledge) -> Assessment:
        problems = list(observation.problems)
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

        level, stateful = self._memory_state(observation, knowledge)
        per_level = stateful and level is not None
        reads = per_level and bool(knowledge.memory.history.readers)
        capacity = knowledge.capacity
        if per_level:  # a cache reader's lines hold for one configuration only (memory/capacities.py)
            capacity = knowledge.memory.capacities.model(level, current if reads else None)
        windows = valid_windows(
            observation.workers, observation.uptime_s, observation.time_s, capacity.settings.warmup_s
        )
        throughput_rps = sum(w.throughput_mean_rps for w in windows)
        saturated = bool(windows) and backlog >= self.saturated_backlog_s * throughput_rps
        capacity.learn(windows, observation.time_s, saturated)
        estimate = capacity.estimate(windows, current, self.max_scaleout, observation.time_s, saturated)
        capacities_rps, capacity_sources = estimate.per_scaleout_rps, estimate.sources
        if reads:
            _observe_balance(knowledge, windows, current)
            capacities_rps, capacity_sources = self._cache_aware(
                knowledge, level, capacities_rps, capacity_sources
            )
            if estimate.current_rps is not None:
                capacities_rps[current] = estimate.current_rps
        if current not in capacities_rps:
            problems.append("no capacity known for the current scale-out yet")

        knowledge.recovery.submit(
            observation.input_timestamps_s, observation.input_rate_rps, _total_throughput(observation)
        )
        knowledge.recovery.expire(observation.time_s)
        self._learn_recoveries(knowledge)
        forecast, recovery_s = None, {}
        if self.forecasting:
            knowledge.forecaster.observe(observation.input_timestamps_s, observation.input_rate_rps)
            forecast = knowledge.forecaster.forecast(observation.time_s)
            recovery_s = self._recovery_per_candidate(
                observation, capacities_rps, forecast.rates_rps, backlog, current, knowledge
            )
        memory = None
        if self.memory_levels is not None and (stateful or observation.operators):
            memory = self._memory_assessment(
                observation, knowledge, level, stateful, forecast.rates_rps if forecast else None, backlog
            )

        return Assessment(
            time_s=observation.time_s,
            current_scaleout=current,
            workload_avg_rps=float(rates.mean()) if len(rates) else math.nan,
            workload_max_rps=float(rates.max()) if len(rates) else math.nan,
            backlog_records=float(backlog),
            capacities_rps=capacities_rps,
            capacity_sources=capacity_sources,
            capacity_method=estimate.method,
            forecast_rps=forecast.rates_rps if forecast else None,
            forecast_model=forecast.model if forecast else "",
            forecast_reason=forecast.reason if forecast else "",
            forecast_wape=forecast.last_wape if forecast else None,
            recovery_s=recovery_s,
            warming_up=not windows,
            problems=tuple(problems),
            cpu_utilization=float(np.mean([w.cpu_mean for w in windows])) if windows else math.nan,
            memory=memory,
            **_worker_rates(observation, capacity.settings.warmup_s),
        )

    def _cache_aware(
        self, knowledge: Knowledge, level: int, per_scaleout: dict[int, float], sources: dict[int, str]
    ) -> tuple[dict[int, float], dict[int, str]]:
        """Capacities at `level` with the unseen scale-outs taken from the cache curve over every level's
        observations (memory/curve.py); unchanged while nothing was observed."""
        curve = observed_curve(knowledge.memory.capacities, self.memory_levels)
        if not curve:
            return dict(per_scaleout), dict(sources)
        return capacities_at(level, knowledge.memory.capacities, self.memory_levels, curve, self.max_scaleout)

    def _memory_state(self, observation: Observation, knowledge: Knowledge) -> tuple[int | None, bool]:
        """The memory level the job runs at and whether it is stateful (False without memory levels).

        The level comes from the observed managed memory, else from the last one known; stateful is
        remembered per operator, so a window that lost the state metrics does not switch models.
        """
        if self.memory_levels is None:
            return None, False
        history = knowledge.memory.history
        history.observe(observation.operators)
        if observation.managed_memory_mb is not None and math.isfinite(observation.managed_memory_mb):
            knowledge.memory.level = self.memory_levels.level_of(observation.managed_memory_mb)
        return knowledge.memory.level, bool(history.stateful)

    def _memory_assessment(
        self,
        observation: Observation,
        knowledge: Knowledge,
        level: int | None,
        stateful: bool,
        forecast_rps: np.ndarray | None,
        backlog_records: float,
    ) -> MemoryAssessment | None:
        """Current level, the operators' signals, and capacity and recovery at every other known level."""
        managed_mb = observation.managed_memory_mb
        if managed_mb is None or not math.isfinite(managed_mb):
            if level is None:
                return None  # neither observed nor ever set: memory cannot be reasoned about
            managed_mb = self.memory_levels.managed_mb(level)
        capacities, recoveries = {}, {}
        if stateful and level is not None:
            if knowledge.memory.history.readers:
                capacities = {
                    other: self._cache_aware(knowledge, other, {}, {})[0]
                    for other in knowledge.memory.capacities.known_levels()
                    if other != level
                }
            else:
                capacities = knowledge.memory.capacities.estimates(
                    self.max_scaleout, observation.time_s, skip=level
                )
            if forecast_rps is not None:
                per_second = _per_second(
                    observation.input_timestamps_s, observation.input_rate_rps, observation.time_s
                )
                replay = replay_records(per_second, self.checkpoint_interval_s)
                downtime_s = knowledge.downtime.estimate("out")  # new memory: every pod restarts
                recoveries = {
                    other: {
                        n: predict_recovery_s(c, forecast_rps, backlog_records, replay, downtime_s)
                        for n, c in per_scaleout.items()
                    }
                    for other, per_scaleout in capacities.items()
                }
        return MemoryAssessment(
            level=level,
            managed_mb=float(managed_mb),
            stateful=stateful,
            operators=observation.operators,
            capacities_by_level=capacities,
            recovery_by_level=recoveries,
        )

    def _recovery_per_candidate(
        self,
        observation: Observation,
        capacities_rps: dict[int, float],
        forecast_rps: np.ndarray,
        backlog_records: float,
        current: int,
        knowledge: Knowledge,
    ) -> dict[int, float]:
        """Predicted recovery (s) of a restart at each candidate scale-out (the current one: a failure)."""
        per_second = _per_second(
            observation.input_timestamps_s, observation.input_rate_rps, observation.time_s
        )
        replay = replay_records(per_second, self.checkpoint_interval_s)
        return {
            scaleout: predict_recovery_s(
                capacity,
                forecast_rps,
                backlog_records,
                replay,
                knowledge.downtime.estimate(direction_of(current, scaleout)),
            )
            for scaleout, capacity in capacities_rps.items()
        }

    @staticmethod
    def _learn_recoveries(knowledge: Knowledge) -> None:
        """Observed recoveries finished off the loop: their downtimes teach the downtime model."""
        for observed in knowledge.recovery.poll():
            knowledge.downtime.observe(observed.direction, observed.downtime_s)
            knowledge.new_recoveries.append(observed)


def _observe_balance(knowledge: Knowledge, windows: list, current: int) -> None:
    """How evenly the keys spread at this scale-out: mean over max of the workers' throughputs (for the
    cache curve); only from a window in which every worker reported."""
    throughputs = [w.throughput_mean_rps for w in windows]
    if len(throughputs) == current and max(throughputs, default=0.0) > 0:
        knowledge.memory.capacities.observe_balance(current, float(np.mean(throughputs) / max(throughputs)))


def _worker_rates(observation: Observation, warmup_s: float) -> dict[str, tuple[float, ...]]:
    """Per worker, mean throughput and busy ratio over the samples past the warm-up (DS2's and the Flink
    operator's inputs); workers without such samples are left out."""
    uptime_s = observation.uptime_s
    started_s = (
        observation.time_s - uptime_s if uptime_s is not None and math.isfinite(uptime_s) else -math.inf
    )
    throughputs, busy = [], []
    for worker in observation.workers:
        keep = np.isfinite(worker.throughput_rps) & (worker.timestamps_s >= started_s + warmup_s)
        if not keep.any():
            continue
        throughputs.append(float(worker.throughput_rps[keep].mean()))
        ratios = worker.busy_ratio[keep] if worker.busy_ratio is not None else np.array([math.nan])
        busy.append(float(ratios.mean()) if np.isfinite(ratios).all() else math.nan)
    return {"worker_throughput_rps": tuple(throughputs), "worker_busy_ratio": tuple(busy)}


def _total_throughput(observation: Observation) -> np.ndarray:
    """Job throughput at each input-rate timestamp; NaN where no worker reported (the job was down)."""
    total = np.full(len(observation.input_timestamps_s), np.nan)
    for worker in observation.workers:
        values = np.interp(
            observation.input_timestamps_s, worker.timestamps_s, worker.throughput_rps, np.nan, np.nan
        )
        total = np.where(np.isnan(total), values, total + np.nan_to_num(values))
    return total


def _per_second(timestamps_s: np.ndarray, rates_rps: np.ndarray, now_s: float) -> np.ndarray:
    """The window's input rate on a one-second grid ending at now (for the replay estimate)."""
    known = np.isfinite(rates_rps)
    if not known.any():
        return np.array([np.nan])
    seconds = np.arange(np.floor(timestamps_s[known][0]), np.floor(now_s) + 1)
    return np.interp(seconds, timestamps_s[known], rates_rps[known])
