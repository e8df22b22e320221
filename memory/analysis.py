"""Memory-aware analysis: the memory extension of the loop (an `AnalysisExtension`, mape/extensions.py).

A stateful job learns capacity per memory level (one model per level; per level and scale-out for an
operator that reads through the block cache, whose unseen configurations come from the cache curve,
memory/curve.py), and the Assessment carries the other known levels' capacities and recoveries. A
stateless job, or one whose memory cannot be told, is analysed exactly as without memory levels. An
executed decision enters each stateful operator's decision history.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from capacity.model import CapacityEstimate, CapacityModel, WorkerWindow
from mape.analyze import per_second
from mape.knowledge import Knowledge
from memory.curve import capacities_at, observed_curve
from memory.knowledge import MemoryKnowledge, memory_of
from memory.levels import MemoryLevels
from messages.types import Assessment, Decision, MemoryAssessment, Observation
from recovery.predict import predict_restarts, replay_records


class MemoryAnalysis:
    """The per-level capacity model, the cache-aware capacities and the MemoryAssessment."""

    def __init__(
        self,
        levels: MemoryLevels,
        max_scaleout: int,
        checkpoint_interval_s: float,
        lag_slo_s: float | None = None,
    ) -> None:
        self.levels = levels
        self.max_scaleout = max_scaleout
        self.checkpoint_interval_s = checkpoint_interval_s
        self.lag_slo_s = lag_slo_s

    def capacity_model(
        self, observation: Observation, knowledge: Knowledge, current: int
    ) -> CapacityModel | None:
        """Learns the operators and the level from the observation, then picks the level's model (a cache
        reader's lines hold for one configuration only, memory/capacities.py); None for a stateless job or
        an unknown level.

        The level comes from the observed managed memory, else from the last one known; stateful is
        remembered per operator, so a window that lost the state metrics does not switch models.
        """
        memory = memory_of(knowledge)
        memory.history.observe(observation.operators)
        if observation.managed_memory_mb is not None and math.isfinite(observation.managed_memory_mb):
            memory.level = self.levels.level_of(observation.managed_memory_mb)
        if not _per_level(memory):
            return None
        return memory.capacities.model(memory.level, current if memory.history.readers else None)

    def refine_estimate(
        self, knowledge: Knowledge, windows: list[WorkerWindow], current: int, estimate: CapacityEstimate
    ) -> CapacityEstimate:
        """For a cache reader: the unseen scale-outs' capacities from the cache curve (the current one stays
        the model's estimate)."""
        memory = memory_of(knowledge)
        if not (_per_level(memory) and memory.history.readers):
            return estimate
        _observe_balance(memory, windows, current)
        per_scaleout, sources = self._cache_aware(
            memory, memory.level, estimate.per_scaleout_rps, estimate.sources
        )
        if estimate.current_rps is not None:
            per_scaleout[current] = estimate.current_rps
        return dataclasses.replace(estimate, per_scaleout_rps=per_scaleout, sources=sources)

    def refine(self, observation: Observation, knowledge: Knowledge, assessment: Assessment) -> Assessment:
        """The assessment with its MemoryAssessment (None where memory cannot be reasoned about)."""
        memory = memory_of(knowledge)
        stateful = bool(memory.history.stateful)
        if not (stateful or observation.operators):
            return assessment
        return dataclasses.replace(
            assessment,
            memory=self._memory_assessment(
                observation, memory, knowledge, stateful, assessment.forecast_rps, assessment.backlog_records
            ),
        )

    def after_execute(
        self, assessment: Assessment, decision: Decision, applied: bool, knowledge: Knowledge
    ) -> None:
        """An executed reconfiguration enters each stateful operator's decision history (`applied`: the
        memory change was applied, so the job now runs at the decision's level)."""
        view = assessment.memory
        if view is None:
            return
        memory = memory_of(knowledge)
        to_level = decision.target_memory_level if applied else view.level
        if applied:
            memory.level = to_level
        if view.stateful:
            memory.history.record(decision, view.level, to_level, view.operators)

    def _cache_aware(
        self, memory: MemoryKnowledge, level: int, per_scaleout: dict[int, float], sources: dict[int, str]
    ) -> tuple[dict[int, float], dict[int, str]]:
        """Capacities at `level` with the unseen scale-outs taken from the cache curve over every level's
        observations (memory/curve.py); unchanged while nothing was observed."""
        curve = observed_curve(memory.capacities, self.levels)
        if not curve:
            return dict(per_scaleout), dict(sources)
        return capacities_at(level, memory.capacities, self.levels, curve, self.max_scaleout)

    def _memory_assessment(
        self,
        observation: Observation,
        memory: MemoryKnowledge,
        knowledge: Knowledge,
        stateful: bool,
        forecast_rps: np.ndarray | None,
        backlog_records: float,
    ) -> MemoryAssessment | None:
        """Current level, the operators' signals, and capacity and recovery at every other known level."""
        level = memory.level
        managed_mb = observation.managed_memory_mb
        if managed_mb is None or not math.isfinite(managed_mb):
            if level is None:
                return None  # neither observed nor ever set: memory cannot be reasoned about
            managed_mb = self.levels.managed_mb(level)
        capacities, recoveries, catch_ups = {}, {}, {}
        if stateful and level is not None:
            if memory.history.readers:
                capacities = {
                    other: self._cache_aware(memory, other, {}, {})[0]
                    for other in memory.capacities.known_levels()
                    if other != level
                }
            else:
                capacities = memory.capacities.estimates(self.max_scaleout, observation.time_s, skip=level)
            if forecast_rps is not None:
                rates = per_second(
                    observation.input_timestamps_s, observation.input_rate_rps, observation.time_s
                )
                # replacing every TaskManager is a failover on Flink 2.x too: it replays (scale_out_at_checkpoint
                # is about added TaskManagers only)
                replay = replay_records(rates, self.checkpoint_interval_s)
                downtime_s = knowledge.downtime.estimate("out")  # new memory: every pod restarts
                for other, per_scaleout in capacities.items():
                    recoveries[other], lag = predict_restarts(
                        per_scaleout, forecast_rps, backlog_records, replay, downtime_s, self.lag_slo_s
                    )
                    if lag:
                        catch_ups[other] = lag
        return MemoryAssessment(
            level=level,
            managed_mb=float(managed_mb),
            stateful=stateful,
            operators=observation.operators,
            capacities_by_level=capacities,
            recovery_by_level=recoveries,
            lag_catch_up_by_level=catch_ups,
        )


def _per_level(memory: MemoryKnowledge) -> bool:
    """Whether the job learns capacity per memory level: it is stateful and its level is known."""
    return bool(memory.history.stateful) and memory.level is not None


def _observe_balance(memory: MemoryKnowledge, windows: list[WorkerWindow], current: int) -> None:
    """How evenly the keys spread at this scale-out: mean over max of the workers' throughputs (for the
    cache curve); only from a window in which every worker reported."""
    throughputs = [w.throughput_mean_rps for w in windows]
    if len(throughputs) == current and max(throughputs, default=0.0) > 0:
        memory.capacities.observe_balance(current, float(np.mean(throughputs) / max(throughputs)))
