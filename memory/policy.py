"""The memory-aware `foresail` policy: Daedalus's proactive search per memory level, Justin's Algorithm 1 to
explore memory levels, and a cost comparison of "n workers at level x" options.

1. The foresail rules run at the current level (the CPU plan). A stateless job keeps that plan exactly; it
   only drops its managed memory when the plan scales out anyway (pods start then), so it never restarts
   for memory alone. Missing state signals also leave the CPU plan untouched.
2. When the CPU plan wants to scale out a stateful job, Justin's Algorithm 1 decides first, for levels
   the job has never run at (no capacity knowledge yet):
   - ``memory-up``: the last reconfiguration did not raise memory and the job shows memory pressure
     (hit rate < Δθ or state latency > Δτ): one level up at the same scale-out, instead of scaling out
     (with more workers only where the current level's do not carry the load until the next decision);
   - ``memory-up-again``: the last reconfiguration raised memory and improved the hit rate or the latency
     (by the configured margins, Justin's hysteresis) and misses remain: one more level up;
   - ``memory-rollback``: the last reconfiguration raised memory and improved neither: back to the level
     before it, scaled out as the foresail rules find at that level.
3. Otherwise every level with capacity knowledge is searched with the same foresail rules (at a level the
   job does not run at, every candidate is a change, so only long-lived candidates count) and the cheapest
   option by price of CPU and memory wins (``cheaper-level`` when it is not the current level). Another
   level must save at least `switch_min_saving` over the CPU plan (its capacities are less certain than the
   current level's, and leaving a configuration that holds costs a restart), unless nothing at the current
   level is valid; so the CPU plan wins ties.

Before these, bad data and configuration changes are settled: an implausible managed-memory reading holds
the memory (the CPU plan stands, with the reason); a job running with more memory than `memory.max_level`
allows steps down to the top level (``memory-above-max-level``); a stateful job without managed memory (it
was released while its state metrics were missing) goes back to level 0 (``memory-restore``); a stateless
job is released only after its windows showed no state for `RELEASE_AFTER_S`. Implausible hit rates and state
latencies are ignored, a rollback to a level outside 0..max_level is skipped, and switching to another
level meets the rescale budget and the scale-in checks from the real current scale-out (`_held`).

A level known from capacity knowledge is never "explored" again by step 2: a scale-up that was rolled back
stays known as the worse option, so the policy cannot oscillate up and back. A memory change that timed out
(the job never ran with it) is no step to judge, and neither its level nor any above is planned for an hour
(`MemoryAssessment.unreachable_levels`): explored again, it timed out again.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import structlog

from mape.knowledge import Knowledge
from mape.plan import Proposal
from mape.proactive import ProactivePolicy, carried_rps, planned_forecast
from memory.cost import Prices
from memory.history import OperatorDecision
from memory.knowledge import memory_of
from memory.levels import MemoryLevels
from memory.signals import (
    has_signal,
    highest_latency_ns,
    hit_rate_of,
    implausible,
    latency_ns_of,
    lowest_hit_rate,
)
from messages.types import Assessment, MemoryAssessment, OperatorState

LOG = structlog.get_logger("foresail.memory")

RELEASE_AFTER_S = 60.0
"""How long a job's windows must show operators without state before it counts as stateless and its
managed memory is released (with a scale-out): a first window may lack its RocksDB and latency metrics
(they come some seconds after a start, or a query fails), so one window is no evidence; a minute is two
windows of the default loop, seven of a 10-s one. `memory-restore` takes back a release that was wrong.
Five windows kept the memory for good where the only scale-out came earlier: a cold start under its load
scales out at its second window (the memory benchmark's stateless job held 16 x 158 MB to its end)."""


@dataclass(frozen=True)
class MemorySettings:
    """Thresholds of the memory policy (defaults and meaning in config/schema.py, section `memory`)."""

    hit_rate_threshold: float = 0.8
    latency_threshold_ns: float = 1e6
    min_hit_rate_gain: float = 0.01
    min_latency_gain: float = 0.05
    switch_min_saving: float = 0.10
    release_stateless: bool = True


class MemoryAwarePolicy:
    """`foresail` with memory levels (see module docstring); `propose` keeps the CPU-only Policy API."""

    name = "foresail"

    def __init__(
        self,
        cpu: ProactivePolicy,
        levels: MemoryLevels,
        prices: Prices,
        settings: MemorySettings | None = None,
        level_up_lookahead_s: float = 0.0,
    ) -> None:
        self.cpu = cpu
        self.levels = levels
        self.prices = prices
        self.settings = settings or MemorySettings()
        self.level_up_lookahead_s = level_up_lookahead_s

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]:
        proposal = self.propose_configuration(assessment, knowledge)
        return proposal.scaleout, proposal.rule, proposal.reasons

    def urgent(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]] | None:
        """The CPU policy's surge rule (memory stays as it is: a surge needs capacity now)."""
        urgent = getattr(self.cpu, "urgent", None)
        return urgent(assessment, knowledge) if urgent is not None else None

    def propose_configuration(self, assessment: Assessment, knowledge: Knowledge) -> Proposal:
        cpu = Proposal(*self.cpu.propose(assessment, knowledge))
        try:
            return self._decide(assessment, knowledge, cpu)
        except (ArithmeticError, LookupError, TypeError, ValueError) as error:
            # data no rule foresaw: the loop goes on CPU-only rather than failing every iteration
            LOG.error("memory-decision-failed", error=f"{type(error).__name__}: {error}")
            return _note(cpu, f"memory decision failed ({type(error).__name__}: {error}): CPU-only decision")

    def _decide(self, assessment: Assessment, knowledge: Knowledge, cpu: Proposal) -> Proposal:
        memory, bad_reading = assessment.memory, memory_of(knowledge).bad_reading
        if bad_reading is not None:
            return _note(cpu, bad_reading)
        if memory is None:
            return cpu
        if not memory.stateful:
            return self._stateless(assessment, knowledge, memory, cpu)
        if memory.level is not None and memory.level not in self.levels.all:
            return _note(
                cpu, f"memory level {memory.level} outside 0..{self.levels.max_level}: CPU-only decision"
            )
        if memory.managed_mb > 0 and self.levels.above_top(memory.managed_mb):
            return self._step_down(assessment, memory, cpu)
        if memory.level is None:
            return self._restore(assessment, memory, cpu)
        operators = memory.stateful_operators
        if not any(has_signal(o) for o in operators):
            return _note(cpu, "memory signals missing (no hit rate, no state latency): CPU-only decision")
        if cpu.rule == "only-if-necessary":
            return cpu
        bad = implausible(operators)
        if bad:
            cpu = _note(cpu, f"implausible state signals of {', '.join(bad)} ignored as bad data")
        if cpu.scaleout > assessment.current_scaleout:
            justin = self._justin(assessment, knowledge, memory, operators, cpu)
            if justin is not None:
                return justin
        return self._cheapest(assessment, knowledge, memory, cpu)

    # ---- the rules ------------------------------------------------------------------------------
    def _stateless(
        self, a: Assessment, knowledge: Knowledge, memory: MemoryAssessment, cpu: Proposal
    ) -> Proposal:
        """Release the managed memory with a scale-out, once the operators have shown no state for a while
        (state metrics that are missing at first must not cost a stateful job its memory)."""
        if not (
            self.settings.release_stateless and memory.managed_mb > 0 and cpu.scaleout > a.current_scaleout
        ):
            return cpu
        since = memory_of(knowledge).stateless_since_s
        stateless_s = 0.0 if since is None else a.time_s - since
        if stateless_s < RELEASE_AFTER_S:
            return _note(
                cpu,
                f"no stateful operator for {stateless_s:.0f} s (release after {RELEASE_AFTER_S:.0f} s): memory kept",
            )
        reason = (
            f"no stateful operator: managed memory ({memory.managed_mb:.0f} MB) released with this scale-out"
        )
        return dataclasses.replace(cpu, managed_mb=0.0, memory_level=None, reasons=(*cpu.reasons, reason))

    def _restore(self, a: Assessment, memory: MemoryAssessment, cpu: Proposal) -> Proposal:
        """A stateful job without managed memory (released while its state did not show) goes back to level
        0: its RocksDB gets no block cache otherwise, and no memory rule could ever raise it."""
        if cpu.rule == "only-if-necessary":
            return _note(cpu, "stateful job without managed memory: back to level 0 once a restart is due")
        managed = self.levels.managed_mb(0)
        why = f"stateful job without managed memory ({memory.managed_mb:.0f} MB per slot)"
        plan = f"back to level 0 ({managed:.0f} MB per slot) with {cpu.scaleout} workers ({cpu.rule})"
        return Proposal(cpu.scaleout, "memory-restore", (why, plan, *cpu.reasons), managed, 0)

    def _step_down(self, a: Assessment, memory: MemoryAssessment, cpu: Proposal) -> Proposal:
        """A job running with more memory than `memory.max_level` allows (the option was lowered) steps down
        to the top level, with no fewer workers than now: less memory never carries more."""
        top, managed = self.levels.max_level, self.levels.top_mb
        scaleout = max(cpu.scaleout, a.current_scaleout)
        why = (
            f"runs with {memory.managed_mb:.0f} MB per slot, above memory.max_level {top} ({managed:.0f} MB): "
            f"down to level {top} with {scaleout} workers"
        )
        return Proposal(scaleout, "memory-above-max-level", (why, *cpu.reasons), managed, top)

    def _justin(
        self,
        a: Assessment,
        knowledge: Knowledge,
        memory: MemoryAssessment,
        operators: tuple[OperatorState, ...],
        cpu: Proposal,
    ) -> Proposal | None:
        """Justin's Algorithm 1 where it explores a level without capacity knowledge; None: not applicable."""
        s, level = self.settings, memory.level
        hit_rate, latency_ns = lowest_hit_rate(operators), highest_latency_ns(operators)
        signals = f"hit rate {_pct(hit_rate)}, state latency {_ms(latency_ns)}"
        up = level + 1
        unexplored = (
            up <= self.levels.max_level
            and up not in memory.capacities_by_level
            and up not in memory.unreachable_levels
        )
        last = _last_decisions(knowledge, operators)
        if last and last[0].scaled_up:
            verdict = self._improved(operators, last)
            if verdict is None:
                return None  # nothing comparable to judge the last step by: no step of Justin's
            if verdict:
                misses_left = hit_rate < 1.0 or latency_ns > s.latency_threshold_ns
                if unexplored and misses_left:
                    return self._level_up(a, up, "memory-up-again", f"last scale-up improved: {signals}")
                return None
            back = last[0].from_level
            if back not in self.levels.all:
                LOG.warning("memory-rollback-skipped", target_level=back, max_level=self.levels.max_level)
                return None  # a stateful job keeps a level, and the configuration may forbid the old one
            return self._rollback(a, knowledge, memory, back, signals, cpu)
        pressure = hit_rate < s.hit_rate_threshold or latency_ns > s.latency_threshold_ns
        if pressure and unexplored:
            why = (
                f"memory pressure: {signals} (thresholds {_pct(s.hit_rate_threshold)}, "
                f"{_ms(s.latency_threshold_ns)})"
            )
            return self._level_up(a, up, "memory-up", why)
        return None

    def _improved(self, operators: tuple[OperatorState, ...], last: list[OperatorDecision]) -> bool | None:
        """Did the last step raise any operator's hit rate or cut its latency? None: nothing comparable."""
        s, now = self.settings, {o.name: o for o in operators}
        comparable = False
        for entry in last:
            current = now.get(entry.operator)
            if current is None:
                continue
            hit_rate, latency_ns = hit_rate_of(current), latency_ns_of(current)
            if math.isfinite(hit_rate) and math.isfinite(entry.hit_rate_before):
                comparable = True
                if hit_rate >= entry.hit_rate_before + s.min_hit_rate_gain:
                    return True
            if math.isfinite(latency_ns) and math.isfinite(entry.latency_ns_before):
                comparable = True
                if latency_ns <= entry.latency_ns_before * (1 - s.min_latency_gain):
                    return True
        return False if comparable else None

    def _level_up(self, a: Assessment, level: int, rule: str, why: str) -> Proposal:
        """One level up instead of the scale-out. When the job does not carry the load until the next
        decision can follow (the present load and, with `level_up_lookahead_s`, the forecast's upper bound
        over that time), it gets the workers that carry it at the current level too: exploring memory must
        not starve it (Justin only ever substituted small steps; from one worker at 50k records/s the plan
        jumps to 17; on a ramp, a level-up at the same scale-out met the load it could not carry inside
        the stabilization window that followed)."""
        managed = self.levels.managed_mb(level)
        scaleout, ahead_s = a.current_scaleout, self.level_up_lookahead_s
        need = carried_rps(a, ahead_s) if ahead_s > 0 else a.workload_avg_rps
        load = (
            "the present"
            if need <= a.workload_avg_rps
            else f"the forecast upper bound over the next {ahead_s:.0f} s,"
        )
        reason = f"scale up to level {level} ({managed:.0f} MB per slot) at {scaleout} workers instead of scaling out"
        if not a.capacity(scaleout) > need:
            carrying = [n for n, c in sorted(a.capacities_rps.items()) if n > scaleout and c > need]
            scaleout = carrying[0] if carrying else self.cpu.max_scaleout
            which = "the fewest that carry" if carrying else "the most: none carries"
            reason = (
                f"scale up to level {level} ({managed:.0f} MB per slot) with {scaleout} workers, {which} "
                f"{load} {need:.0f} rps at level {level - 1}"
            )
        return Proposal(scaleout, rule, (why, reason), managed, level)

    def _rollback(
        self,
        a: Assessment,
        knowledge: Knowledge,
        memory: MemoryAssessment,
        back: int,
        signals: str,
        cpu: Proposal,
    ) -> Proposal:
        """Back to the level before the scale-up that did not help, scaled out as that level needs (at
        least as far as the CPU plan scales out at the current level: less memory never carries more)."""
        managed = self.levels.managed_mb(back)
        why = f"last scale-up to level {memory.level} improved neither hit rate nor latency ({signals})"
        scaleout, plan = cpu.scaleout, f"scale out as planned at level {memory.level}: {cpu.scaleout} workers"
        if back in self._other_levels(memory):
            target, rule, reasons = self._plan_at(a, knowledge, memory, back)
            if target > scaleout:
                scaleout, plan = target, f"at level {back}: {target} workers ({rule}: {reasons[0]})"
        return Proposal(scaleout, "memory-rollback", (why, plan), managed, back)

    def _cheapest(
        self, a: Assessment, knowledge: Knowledge, memory: MemoryAssessment, cpu: Proposal
    ) -> Proposal:
        """The cheapest valid (n, level) over the levels with capacity knowledge; "here" priced at the
        level's memory (the reading may be off-level: Flink's default size, a unit error)."""
        level = memory.level
        here = self.prices.cost(cpu.scaleout, self.levels.managed_mb(level))
        if cpu.rule == "max-scaleout":
            here = math.inf  # nothing is valid at the current level
        best = (here, cpu.scaleout, level, cpu.rule, cpu.reasons)
        options = [f"level {level}: {cpu.scaleout} workers, cost {here:.2f}"]
        for other in self._other_levels(memory):
            scaleout, rule, reasons = self._plan_at(a, knowledge, memory, other)
            if rule != "long-lived":
                continue
            held = self._held(a, knowledge, memory, other, scaleout, cpu)
            if held is not None:
                options.append(held)
                continue
            cost = self.prices.cost(scaleout, self.levels.managed_mb(other))
            options.append(f"level {other}: {scaleout} workers, cost {cost:.2f}")
            if cost < best[0]:
                best = (cost, scaleout, other, rule, reasons)
        cost, scaleout, chosen, rule, reasons = best
        if chosen == level or not math.isfinite(cost):
            return _note(cpu, "; ".join(options)) if len(options) > 1 else cpu
        if cost > here * (1 - self.settings.switch_min_saving):
            return _note(
                cpu, f"{'; '.join(options)}: saving below {self.settings.switch_min_saving:.0%}, kept"
            )
        managed = self.levels.managed_mb(chosen)
        why = f"{scaleout} workers at level {chosen} ({managed:.0f} MB per slot) cost {cost:.2f} < {here:.2f}"
        return Proposal(scaleout, "cheaper-level", (why, f"{rule}: {reasons[0]}", *options), managed, chosen)

    def _held(
        self,
        a: Assessment,
        knowledge: Knowledge,
        memory: MemoryAssessment,
        level: int,
        scaleout: int,
        cpu: Proposal,
    ) -> str | None:
        """Why switching to `scaleout` workers at `level` must wait, or None. The switch restarts the job,
        so it meets what the CPU rules ask of a rescale from the real current scale-out: the rescale budget
        (unless the CPU plan restarts the job anyway to scale out, or nothing is valid here), no scale-in
        while catching up, and a scale-in that pays and gives up at most `max_scale_in_share`."""
        current, capacity = a.current_scaleout, memory.capacities_by_level[level].get(scaleout, math.nan)
        capacity_now = a.capacity(current)
        budget = knowledge.rescale_budget_spent(a.time_s, self.cpu.max_rescales_per_h)
        if budget and not (cpu.scaleout > current or cpu.rule == "max-scaleout"):
            return f"level {level}: {scaleout} workers held ({budget})"
        if capacity < capacity_now and a.backlog_records > capacity * self.cpu.loop_interval_s:
            return f"level {level}: {scaleout} workers held (still catching up)"
        if scaleout >= current:
            return None
        share = self.cpu.max_scale_in_share
        if share is not None and not capacity >= (1.0 - share) * capacity_now:
            return f"level {level}: {scaleout} workers give up more than {share:.0%} of the running capacity"
        view = self._view(a, memory, level, current)
        worth, why = self.cpu.scale_in_pays(view, knowledge, scaleout, planned_forecast(view))
        return None if worth else f"level {level}: scale-in not worth it ({why})"

    def _plan_at(
        self, a: Assessment, knowledge: Knowledge, memory: MemoryAssessment, level: int
    ) -> tuple[int, str, tuple[str, ...]]:
        """The foresail rules on another level's capacities. The job does not run at that level, so no
        scale-out there is current (current_scaleout 0): only changes, which must be long-lived; what the
        rules ask of a change from the real scale-out is checked after (`_held`)."""
        return self.cpu.propose(self._view(a, memory, level, 0), knowledge)

    def _other_levels(self, memory: MemoryAssessment) -> list[int]:
        """The other levels worth planning: in 0..max_level, with some plausible capacity, and not one whose
        change timed out lately."""
        return [
            level
            for level in sorted(set(memory.capacities_by_level) & set(self.levels.all))
            if _usable(memory.capacities_by_level[level]) and level not in memory.unreachable_levels
        ]

    @staticmethod
    def _view(a: Assessment, memory: MemoryAssessment, level: int, current: int) -> Assessment:
        """The assessment as at `level`, running `current` workers."""
        return dataclasses.replace(
            a,
            current_scaleout=current,
            capacities_rps=_usable(memory.capacities_by_level[level]),
            capacity_sources={},
            recovery_s=memory.recovery_by_level.get(level, {}),
            lag_catch_up_s=memory.lag_catch_up_by_level.get(level, {}),
            memory=None,
        )


def _last_decisions(knowledge: Knowledge, operators: tuple[OperatorState, ...]) -> list[OperatorDecision]:
    """The last reconfiguration of each stateful operator, newest first."""
    last = memory_of(knowledge).history.last
    entries = [last[o.name] for o in operators if o.name in last]
    return sorted(entries, key=lambda e: e.time_s, reverse=True)


def _usable(per_scaleout: dict[int, float]) -> dict[int, float]:
    """The finite, positive capacities (an infinite one would promise a single worker carries all)."""
    return {n: c for n, c in per_scaleout.items() if math.isfinite(c) and c > 0}


def _note(proposal: Proposal, reason: str) -> Proposal:
    return dataclasses.replace(proposal, reasons=(*proposal.reasons, reason))


def _pct(value: float) -> str:
    return f"{value:.0%}" if math.isfinite(value) else "n/a"


def _ms(value_ns: float) -> str:
    return f"{value_ns / 1e6:.2f} ms" if math.isfinite(value_ns) else "n/a"
