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
import structlog

from capacity.model import CapacityEstimate, CapacityModel, WorkerWindow
from mape.analyze import per_second
from mape.knowledge import Knowledge
from memory.curve import capacities_at, observed_curve
from memory.knowledge import RETRY_FAILED_LEVEL_S, MemoryKnowledge, memory_of, reconcile
from memory.levels import MemoryLevels
from messages.types import Assessment, Decision, MemoryAssessment, Observation
from recovery.predict import predict_restarts, replay_records

LOG = structlog.get_logger("foresail.memory")


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
        reconcile(memory, self.levels)
        _forget_failed(memory, observation, self.levels)
        memory.history.observe(observation.operators)
        _count_stateless(memory, observation)
        reading = self._reading(memory, observation.managed_memory_mb)
        if reading is not None:
            memory.level, memory.managed_mb = self.levels.level_of(reading), reading
        if not _per_level(memory):
            return None
        return memory.capacities.model(memory.level, current if memory.history.readers else None)

    def _reading(self, memory: MemoryKnowledge, managed_mb: float | None) -> float | None:
        """The window's managed memory per slot; None when not read or implausible (bad data: the memory
        decision holds, and says why: `bad_reading`)."""
        memory.bad_reading = None
        if managed_mb is None or (isinstance(managed_mb, float) and math.isnan(managed_mb)):
            return None
        if self.levels.plausible(managed_mb):
            return float(managed_mb)
        memory.bad_reading = (
            f"managed memory reading {managed_mb!r} MB per slot is implausible (levels "
            f"{self.levels.base_mb:.0f}..{self.levels.top_mb:.0f} MB): bad data, memory held"
        )
        LOG.warning("memory-reading-implausible", managed_mb=managed_mb, top_mb=self.levels.top_mb)
        return None

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
            memory.level, memory.managed_mb = to_level, decision.target_managed_mb
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
        managed_mb = memory.managed_mb
        if managed_mb is None:
            if level is None:
                return None  # neither observed nor ever set: memory cannot be reasoned about
            managed_mb = self.levels.managed_mb(level)
        capacities, recoveries, catch_ups = {}, {}, {}
        top = self.levels.max_level
        if stateful and level is not None:
            if memory.history.readers:
                capacities = {
                    other: self._cache_aware(memory, other, {}, {})[0]
                    for other in memory.capacities.known_levels(top)
                    if other != level
                }
            else:
                capacities = memory.capacities.estimates(
                    self.max_scaleout, observation.time_s, skip=level, max_level=top
                )
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
            unreachable_levels=memory.unreachable_levels(self.levels, observation.time_s),
        )


def _forget_failed(memory: MemoryKnowledge, observation: Observation, levels: MemoryLevels) -> None:
    """Memory changes the execute side gave up on: their history entries change no level (a level-up that
    never ran was judged "improved nothing" and rolled back), the level known is the one before, and the
    memory of a level-up is not asked for again for a while (`MemoryKnowledge.unreachable_levels`; a
    level explored again timed out again)."""
    if not observation.failed_memory_changes:
        return
    memory.failed_changes = [
        f for f in memory.failed_changes if observation.time_s - f.requested_s < RETRY_FAILED_LEVEL_S
    ]
    for failed in observation.failed_memory_changes:
        change = memory.history.withdraw(failed.requested_s)
        if change is None or change.from_level is None:
            continue  # a stateless job's release, or nothing recorded: no level to correct or to avoid
        if change.scaled_up:  # more memory per pod found no room; less is not that, and is not avoided
            memory.failed_changes.append(failed)
        back = change.from_level in levels.all  # a level above a lowered max_level is stepped down by policy
        if back and memory.managed_mb is not None and abs(memory.managed_mb - failed.managed_mb) < 1:
            # set when executed; a job that is down reads no memory to correct it
            memory.level, memory.managed_mb = change.from_level, levels.managed_mb(change.from_level)
        LOG.warning(
            "memory-change-timed-out",
            managed_mb=failed.managed_mb,
            requested_s=failed.requested_s,
            from_level=change.from_level,
            to_level=change.to_level,
            reason="the job never ran with it: not a step to judge"
            + (f", and not tried again for {RETRY_FAILED_LEVEL_S:.0f} s" if change.scaled_up else ""),
        )


def _per_level(memory: MemoryKnowledge) -> bool:
    """Whether the job learns capacity per memory level: it is stateful and its level is known."""
    return bool(memory.history.stateful) and memory.level is not None


def _dated_before(since_s: float | None, now_s: float) -> bool:
    """A run dated at or before now (one stored after now never aged: the memory was kept for good)."""
    return since_s is not None and since_s <= now_s


def _count_stateless(memory: MemoryKnowledge, observation: Observation) -> None:
    """Dates the run of windows whose operators were reported without state (a job is released of its
    managed memory only once it has lasted long enough: state metrics that come late must not cost a
    stateful job its memory)."""
    if any(o.stateful for o in observation.operators):
        memory.stateless_since_s = None
    elif observation.operators and not _dated_before(memory.stateless_since_s, observation.time_s):
        memory.stateless_since_s = observation.time_s


def _observe_balance(memory: MemoryKnowledge, windows: list[WorkerWindow], current: int) -> None:
    """How evenly the keys spread at this scale-out: mean over max of the workers' throughputs (for the
    cache curve); only from a window in which every worker reported."""
    throughputs = [w.throughput_mean_rps for w in windows]
    if len(throughputs) == current and max(throughputs, default=0.0) > 0:
        memory.capacities.observe_balance(current, float(np.mean(throughputs) / max(throughputs)))
