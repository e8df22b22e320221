"""One MAPE-K iteration: Monitor → Analyze → Plan → Execute, then persist Knowledge and audit.

A phase that fails is logged and the iteration holds: nothing raises out of `iterate`. A decision that
names a parallelism per vertex goes to the target's `scale_vertices` (a `VertexScalingTarget`). A decision
that changes the managed memory goes to the target's `reconfigure` (a restart like a rescale) and, once
executed, to the analysis extensions (mape/extensions.py), which learn from it (the memory extension: each
stateful operator's decision history).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import structlog

from mape.analyze import Analyzer
from mape.interfaces import MetricsSource, NotApplied, RateSource, ScalingTarget
from mape.knowledge import Knowledge
from mape.knowledge_store import KnowledgeStore
from mape.plan import GuardedPlan
from mape.recent_load import expected_upper_rps, recent_rps, surging
from mape.skew import IMBALANCE_THRESHOLD, SkewKnowledge, skew_of
from messages.types import RECENT_S, Assessment, Decision, Observation
from recovery.downtime import direction_of
from recovery.tracker import ObservedRecovery

SURGE_SETTLED = 0.02
"""The surge watch acts once the newest rate sample is at most this much above the previous read's: a
step shows as a ramp as long as the rate's meter window (10 s on the twin, 1 min in the default PromQL),
and a surge sized half-way up that ramp takes a second restart."""


@dataclass
class IterationResult:
    """What one iteration saw and did (also returned for the simulator's scoring)."""

    time_s: float
    observation: Observation | None = None
    assessment: Assessment | None = None
    decision: Decision | None = None
    executed: bool = False
    recoveries: list[ObservedRecovery] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    recommendation: str | None = None
    """What a target that deliberately did not apply the decision said (recommend-only, dry run, paused)."""
    skew: dict[str, dict] = field(default_factory=dict)
    """Per keyed vertex name, its imbalance and whether it persists (mape/skew.py), for the metrics."""


class MapeLoop:
    def __init__(
        self,
        source: MetricsSource,
        target: ScalingTarget,
        analyzer: Analyzer,
        plan: GuardedPlan,
        knowledge: Knowledge,
        store: KnowledgeStore,
        window_s: float,
        recovery_target_s: float,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.source = source
        self.target = target
        self.analyzer = analyzer
        self.plan = plan
        self.knowledge = knowledge
        self.store = store
        self.window_s = window_s
        self.recovery_target_s = recovery_target_s
        self.log = log or structlog.get_logger("foresail.audit")
        self.last_assessment: Assessment | None = None
        self._surge_newest_rps: float | None = None

    def surge_seen(self, now_s: float) -> bool:
        """The surge watch between iterations: one read of the input rate alone; True (run an iteration
        now: its plan's surge rule decides) when the load of the last seconds left the last forecast's
        upper bound and exceeds the running capacity on two reads in a row, and the newest sample no longer
        climbs (`SURGE_SETTLED`). The loop interval (60 s) is what a surge otherwise waits before
        anything reacts; a step seen 50 s late had the lag over the SLO before the restart began. Quiet
        for a loop interval after a rescale (its restart is the reaction), while the last iteration's own
        assessment saw the surge (it decided on it), without a forecast (baselines) and where the source
        cannot read the rate alone. Before the first iteration, the first look (`_first_look`)."""
        last, knowledge = self.last_assessment, self.knowledge
        if not isinstance(self.source, RateSource):
            return False
        if last is None:
            return self._first_look(now_s)
        capacity_rps = last.capacity(last.current_scaleout)
        if surging(last.workload_recent_rps, last.expected_upper_rps, capacity_rps):
            return False  # the last iteration saw this surge already: its decision stands until the next
        if knowledge.last_rescale_s is not None and now_s - knowledge.last_rescale_s < self.window_s:
            return False
        expected = expected_upper_rps(knowledge.forecaster.last_forecast, now_s)
        if not math.isfinite(expected):
            return False
        recent, newest = self._read_rate(now_s)
        if not surging(recent, expected, capacity_rps):
            self._surge_newest_rps = None
            return False
        if not self._settled(newest):
            return False
        self.log.info(
            "surge-watch", time_s=now_s, recent_rps=_round(recent), expected_upper_rps=_round(expected)
        )
        return True

    def _first_look(self, now_s: float) -> bool:
        """A daemon that starts informed (a store a capacity plan seeded, or a restarted daemon's) runs its
        first iteration once the input rate has settled (two reads in a row, at the watch's period)
        instead of a whole loop interval after its start: it can size the job from what it knows, and a
        job started far too small runs behind from its first seconds (on the twin, a `wordcount` seeded at
        1 subtask per vertex spent 64-70 s over the SLO waiting for the 60 s loop, and none when it looked
        at 20 s). A cold daemon knows no capacity: it waits for its first loop as before."""
        if not self.knowledge.informed:
            return False
        recent, newest = self._read_rate(now_s)
        if not (math.isfinite(recent) and self._settled(newest)):
            return False
        self.log.info("first-look", time_s=now_s, recent_rps=_round(recent))
        return True

    def _read_rate(self, now_s: float) -> tuple[float, float]:
        """The watch's one read: the mean input rate over the last RECENT_S seconds and the newest sample
        (NaN, NaN when unreadable: the next iteration reads, and reports, the source again)."""
        try:
            timestamps_s, rates_rps = self.source.input_rate(now_s, RECENT_S)
        except Exception as error:
            self.log.warning("surge-watch-unreadable", time_s=now_s, error=_describe(error))
            return math.nan, math.nan
        return recent_rps(timestamps_s, rates_rps, now_s)

    def _settled(self, newest_rps: float) -> bool:
        """Whether the newest sample no longer climbs against the previous read's: a rate meter averages the
        seconds before a sample, so a level is taken only once it settles."""
        previous, self._surge_newest_rps = self._surge_newest_rps, newest_rps
        if previous is None or not newest_rps <= previous * (1.0 + SURGE_SETTLED):
            return False
        self._surge_newest_rps = None
        return True

    def iterate(self, now_s: float) -> IterationResult:
        started = time.perf_counter()
        result = IterationResult(now_s)
        knowledge = self.knowledge
        ahead_s = knowledge.rescales_after_now(now_s)
        if ahead_s:
            self.log.warning(
                "rescale-recorded-after-now",
                time_s=now_s,
                ahead_s=round(ahead_s, 3),
                reason="the clock stepped back (or the store comes from a clock ahead): the recorded "
                "rescales are taken as just happened",
            )
        try:
            result.observation = self.source.observe(now_s, self.window_s)
        except Exception as error:  # a backend failure must not kill the loop
            result.errors["monitor"] = _describe(error)
        if result.observation is not None:
            knowledge.remember_rescales(result.observation.completed_rescales)
            withdrawn = knowledge.withdraw_rescales(result.observation.withdrawn_rescales_s)
            if withdrawn:
                self.log.info(
                    "rescale-withdrawn",
                    time_s=now_s,
                    requested_s=withdrawn,
                    reason="it never reached Flink: neither the stabilization nor the rescale budget "
                    "counts it",
                )
            try:
                result.assessment = self.analyzer.assess(result.observation, knowledge)
                self.last_assessment = result.assessment
            except Exception as error:
                result.errors["analyze"] = _describe(error)
        if result.assessment is not None:
            try:
                result.decision = self.plan.decide(result.assessment, knowledge)
            except Exception as error:
                result.errors["plan"] = _describe(error)
        try:  # what the audit reports of skew: a damaged part of it must not stop the iteration
            skew = skew_of(knowledge)
            if skew is not None:
                result.skew = {v.name: _skew_fields(v) for v in skew.vertices.values()}
        except Exception as error:
            result.errors["skew"] = _describe(error)
        if result.decision is None:
            current = knowledge.last_target_scaleout or 0
            result.decision = Decision(
                now_s, current, current, "hold-phase-error", tuple(result.errors.values())
            )
        self._execute(result)
        knowledge.iteration += 1
        knowledge.last_time_s = now_s
        knowledge.recent_decisions.append(result.decision)
        result.recoveries = list(knowledge.new_recoveries)
        try:
            self.store.save(knowledge, result.decision)
        except Exception as error:  # keep running; the next iteration saves again
            result.errors["persist"] = _describe(error)
        try:  # the audit line is written after the knowledge is saved: a full disk loses the line only
            self._audit(result, knowledge.iteration, (time.perf_counter() - started) * 1000)
        except Exception as error:
            result.errors["audit"] = _describe(error)
        return result

    def _execute(self, result: IterationResult) -> None:
        decision, knowledge = result.decision, self.knowledge
        if decision.changes_vertices and not decision.changes_memory:
            self._execute_vertices(result)
            return
        if decision.reconfigures:
            # a target that cannot change memory (an older backend) still gets the scale-out
            reconfigure = getattr(self.target, "reconfigure", None)
            memory_applied = reconfigure is not None and (
                decision.changes_memory or self._memory_left_behind(decision, result)
            )
            try:
                if memory_applied:
                    reconfigure(decision.target_scaleout, decision.target_managed_mb, result.time_s)
                elif decision.action != "hold":
                    self.target.scale_to(decision.target_scaleout, result.time_s)
                else:
                    raise TypeError(f"{type(self.target).__name__} cannot change the managed memory")
            except NotApplied as note:
                result.recommendation = str(note)
            except Exception as error:
                result.errors["execute"] = _describe(error)
            else:
                result.executed = True
                knowledge.record_rescale(result.time_s, decision.target_scaleout)
                predicted_s = _predicted_recovery_s(result.assessment, decision, memory_applied)
                # new memory restarts every pod, like the pods a scale-out starts
                direction = (
                    "out"
                    if memory_applied
                    else direction_of(decision.current_scaleout, decision.target_scaleout)
                )
                knowledge.recovery.start(result.time_s, direction, predicted_s, self.recovery_target_s)
                self._after_execute(result, memory_applied)
                return
        if result.observation is not None and result.observation.parallelism:
            knowledge.last_target_scaleout = result.observation.parallelism

    def _memory_left_behind(self, decision: Decision, result: IterationResult) -> bool:
        """The target would start TaskManagers with other managed memory than the decision's, which is
        what runs: a change that never took effect (see MemoryScalingTarget.configured_managed_mb)."""
        configured = getattr(self.target, "configured_managed_mb", None)
        if decision.target_managed_mb is None or configured is None:
            return False
        try:
            configured_mb = configured()
        except Exception as error:  # unknown: the scale-out alone, as before
            result.errors["configured-memory"] = _describe(error)
            return False
        return configured_mb is not None and abs(configured_mb - decision.target_managed_mb) >= 1.0

    def _execute_vertices(self, result: IterationResult) -> None:
        """A per-vertex rescale: every vertex's parallelism and the TaskManagers in one step. Its downtime
        comes back measured (`Observation.completed_rescales`), so no recovery watch is started for it: the
        watch would teach the reactive-mode downtimes, which the per-vertex path must not share."""
        decision, knowledge = result.decision, self.knowledge
        scale_vertices = getattr(self.target, "scale_vertices", None)
        try:
            if scale_vertices is None:
                raise TypeError(f"{type(self.target).__name__} cannot rescale single vertices")
            scale_vertices(decision.target_vertex_parallelism, decision.target_scaleout, result.time_s)
        except NotApplied as note:
            result.recommendation = str(note)
            return
        except Exception as error:
            result.errors["execute"] = _describe(error)
            return
        result.executed = True
        knowledge.record_rescale(result.time_s, decision.target_scaleout)
        self._after_execute(result, False)

    def _after_execute(self, result: IterationResult, memory_applied: bool) -> None:
        """The extensions learn the executed decision. The rescale has happened by now: an extension that
        fails here is an error of this iteration, not a loop that stops before the knowledge is saved."""
        for extension in self.analyzer.extensions:
            try:
                extension.after_execute(result.assessment, result.decision, memory_applied, self.knowledge)
            except Exception as error:
                result.errors["after-execute"] = _describe(error)

    def _audit(self, result: IterationResult, iteration: int, duration_ms: float) -> None:
        """One JSON event per iteration: inputs, capacities, the decision and its reasons."""
        assessment, decision = result.assessment, result.decision
        inputs = None
        if assessment is not None:
            inputs = {
                "workload_avg_rps": _round(assessment.workload_avg_rps),
                "workload_max_rps": _round(assessment.workload_max_rps),
                "backlog_records": _round(assessment.backlog_records),
                "parallelism": assessment.current_scaleout,
                "warming_up": assessment.warming_up,
                "problems": list(assessment.problems),
            }
        self.log.info(
            "iteration",
            iteration=iteration,
            time_s=result.time_s,
            inputs=inputs,
            capacity_rps={n: _round(c) for n, c in sorted(assessment.capacities_rps.items())}
            if assessment
            else None,
            capacity_method=assessment.capacity_method if assessment else None,
            capacity_overestimate=round(assessment.capacity_overestimate, 4) if assessment else None,
            forecast=_forecast_summary(assessment),
            recovery_s={n: _round(r) for n, r in sorted(assessment.recovery_s.items())}
            if assessment
            else None,
            lag_catch_up_s={n: _round(s) for n, s in sorted(assessment.lag_catch_up_s.items())}
            if assessment and assessment.lag_catch_up_s
            else None,
            recoveries_observed=[r.to_dict() for r in result.recoveries] or None,
            rescales_completed=[
                {**asdict(r), "finished_s": _finite(r.finished_s), "downtime_s": _finite(r.downtime_s, 3)}
                for r in (result.observation.completed_rescales if result.observation else ())
            ]
            or None,
            **_memory_summary(assessment),
            **({"latency": asdict(assessment.latency)} if assessment and assessment.latency else {}),
            dag=_dag_summary(assessment, skew_of(self.knowledge)),
            decision=decision.to_dict() if decision else None,
            executed=result.executed,
            **({"recommendation": result.recommendation} if result.recommendation else {}),
            errors=result.errors or None,
            duration_ms=round(duration_ms, 2),
        )


def _forecast_summary(assessment: Assessment | None) -> dict | None:
    if assessment is None or assessment.forecast_rps is None:
        return None
    rates = assessment.forecast_rps
    return {
        "model": assessment.forecast_model,
        "reason": assessment.forecast_reason,
        "last_wape": None if assessment.forecast_wape is None else round(assessment.forecast_wape, 4),
        "next_loop_max_rps": _round(float(rates[:60].max())),
        "horizon_max_rps": _round(float(rates.max())),
    }


def _dag_summary(assessment: Assessment | None, skew: SkewKnowledge | None = None) -> dict | None:
    """Which capacity model binds and why, the bottleneck, each vertex's state and needs, and the key
    skew that persists (δ = max/mean busy above 1.2 for several loops: scaling does not fix it)."""
    if assessment is None:
        return None
    by_name = skew.by_name() if skew is not None else {}
    persistent = skew.persistent() if skew is not None else []
    return {
        "model": assessment.capacity_model,
        "reason": assessment.capacity_model_reason,
        "bottleneck_vertex": assessment.bottleneck_vertex,
        "skew": [
            f"key skew persists on {v.describe()}: above {IMBALANCE_THRESHOLD}, scaling out does not help "
            f"its hot subtask beyond parallelism {v.useful_parallelism(max(assessment.capacities_rps, default=1))}"
            for v in persistent
        ]
        or None,
        "vertices": [
            {
                "name": v.name,
                "parallelism": v.parallelism,
                "utilization": _share(v.utilization),
                "backpressured": _share(v.backpressured),
                "true_rate_rps": _round(v.true_rate_rps),
                "selectivity": _share(v.selectivity),
                "skew": _share(v.skew),
                "capacity_rps": _round(v.capacity_rps),
                "needed_parallelism": v.needed_parallelism,
                **(_skew_fields(by_name[v.name]) if v.name in by_name else {}),
            }
            for v in assessment.vertices
        ],
    }


def _skew_fields(skew) -> dict:
    return {
        "imbalance_busy": _share(skew.busy_imbalance),
        "imbalance_records": _share(skew.records_imbalance),
        "skew_persistent": skew.persistent,
        "hot_key_group_share": _share(skew.hot_group_share),
    }


def _share(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


def _memory_summary(assessment: Assessment | None) -> dict:
    """The memory part of the audit event (absent when the analysis is not memory-aware)."""
    if assessment is None or assessment.memory is None:
        return {}
    memory = assessment.memory
    return {
        "memory": {
            "level": memory.level,
            "managed_mb": memory.managed_mb,
            "stateful": memory.stateful,
            "operators": [
                {
                    "name": o.name,
                    "stateful": o.stateful,
                    "cache_hit_rate": None if math.isnan(o.cache_hit_rate) else round(o.cache_hit_rate, 4),
                    "state_latency_ns": _round(o.state_latency_ns),
                }
                for o in memory.operators
            ],
            "capacity_rps_by_level": {
                level: {n: _round(c) for n, c in sorted(per.items())}
                for level, per in sorted(memory.capacities_by_level.items())
            },
        }
    }


def _predicted_recovery_s(assessment: Assessment, decision: Decision, memory_applied: bool) -> float:
    """Predicted recovery of the configuration the decision starts (another memory level's if it changes)."""
    memory = assessment.memory
    if memory is not None and memory_applied and decision.target_memory_level in memory.recovery_by_level:
        return memory.recovery_by_level[decision.target_memory_level].get(decision.target_scaleout, math.inf)
    return assessment.recovery_s.get(decision.target_scaleout, math.inf)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _round(value: float) -> float | None:
    return _finite(value, 1)


def _finite(value: float, digits: int | None = None) -> float | None:
    """JSON's null for NaN (what was not measured), else the value, rounded to `digits`."""
    if not math.isfinite(value):
        return None
    return value if digits is None else round(value, digits)
