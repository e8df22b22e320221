"""The foresail plan per vertex (scaling.granularity: vertex): DS2's walk from the forecast, within
Daedalus's recovery bound, every changed vertex in one rescale.

- Sizing (DS2, Kalavri et al. OSDI'18 §3.2, Eq. 7–8): for a target source rate r, each vertex gets the
  smallest parallelism whose hottest subtask carries its input r · a_v (the learned true rates, input
  ratios and key-group loads of capacity/dag.py, so skew counts), never above its max parallelism. A
  keyed vertex whose key-group loads are not learned yet is sized on its largest key-group range
  (⌈max parallelism / p⌉ groups), so its parallelism lands where the key groups split most evenly for
  the subtasks it runs.
- Slot sharing: subtask i of every vertex runs in slot i and they share its core, so every slot must fit:
  r · Σ_v c_v · a_v · share_v,i / rate_v,i ≤ `SLOT_CPU` (c_v the vertex's CPU per busy second,
  mape/vertex_knowledge.py; shares and rates per subtask, skew included: a hot key's subtask loads its
  own slot, not slot 0). While the fullest slot does not fit, the vertex (with its forward partners) whose
  next subtask relieves it most gets one (rule ``slot-cpu``), where that adds no slot first. Then, where
  that took more slots than the vertices need, a search for a placement on fewer (rule
  ``slot-placement``): a vertex running fewer subtasks than there are slots leaves the last slots to the
  others, e.g. a hot key's subtask a slot of its own.
- Forward edges keep both ends at the same parallelism (Flink chains or pairs them pointwise): vertices
  joined by forward edges grow as one unit, never above the smallest max parallelism among them (Flink
  rejects a vertex above its own with HTTP 400); no step of the sizing raises a vertex above it. A vertex
  of unknown rate (a legacy source reports no busy time) runs as wide as the widest vertex it feeds.
- Slots = the largest parallelism per slot-sharing group, summed over groups; TaskManagers =
  ⌈slots / slots per TaskManager⌉.
- Choice (Daedalus Algorithm 1 with configurations in place of scale-outs): keep the running configuration
  shortly after a rescale while it carries the load and drains its backlog by the next loop
  (``vertex-only-if-necessary``; a saturated job carries what it shows, not what the model says);
  else size for the forecast peak, raised in 5% steps until the predicted recovery (the
  per-vertex path's learned downtime, no replay: Flink 2.x restarts from the checkpoint it waits for,
  FLIP-461) meets the recovery target and the configuration carries the forecast until recovered
  (``vertex-long-lived``; ``vertex-max`` when none does). A scale-out is sized for the peak until the plan
  may next replace it (`scale_out_lookahead_s`: stabilization + one loop), not for the whole horizon's:
  a per-vertex rescale pauses the job for seconds, so growing again when the load does costs less than
  holding the horizon's peak from now on (on the twin's 18 topology × trace cells, 11% fewer CPU-seconds,
  none more seconds over the SLO). Every candidate carries at least the window's average load (Daedalus:
  capacity above the average), whatever the forecast. What comes down must still carry the whole
  horizon, so that a dip between two rises is no scale-in followed by a scale-out, and the forecast's
  upper bound over the next loop (as at job granularity; before the forecaster's first model, the
  fallback window's peak). The running configuration is kept while it
  carries the average load and the forecast until its backlog is drained (at least until the next loop)
  and drains it within the target (``vertex-current-valid``: Daedalus keeps the current scale-out when it
  is valid, and moves only to a long-lived one) unless the new one needs fewer slots (or sheds subtasks
  worth a TaskManager at `subtask_price`) and the job is not catching up.
- Surge (``vertex-surge``, also inside the stabilization window through `urgent`): when the load of the
  last seconds leaves the previous forecast's upper bound and exceeds what the running configuration
  carries, every vertex is sized at once for that load (or the next loop's forecast) plus the backlog and
  what piles up during the pause, drained within `surge_drain_s`; none comes down.
- With `max_scale_in_share` (off by default), a scale-in that runs a vertex at a parallelism never seen
  (its rate carried over from the nearest seen) gives up at most that share of the running configuration's
  modelled capacity (the Flink operator's `scale-down.max-factor`, 0.6 there): a vertex whose per-record
  cost grows with the keys each subtask holds (a session window) carries less there than the carried-over
  rate promises. The next scale-in goes on from there.
- Rescale budget (`max_rescales_per_h`, as at job granularity, mape/proactive.py): once the last hour holds
  the budget less one rescale, the scale-in waits (``vertex-rescale-budget``); scale-outs and surges are
  never held, and are sized for the whole horizon's peak instead of the lookahead's, since the budget may
  keep them that long.
- Rescale price (`rescale_price_ws`, off by default): what one rescale is worth avoiding, in
  TaskManager-seconds. A scale-in waits while what it saves (the TaskManagers it frees, or the subtasks it
  sheds at `subtask_price`) over the horizon is worth less (``vertex-rescale-not-worth-it``: a dead band
  of price / horizon TaskManagers); a scale-out is sized, among the forecast peaks of lookaheads one loop
  apart from the next decision's to the horizon's, for the one that costs least over the horizon: its
  TaskManagers while it carries the forecast, then the price and the horizon's configuration (a short
  rise is grown in steps, a long one in one). The rescale budget's hold works greedily (the first
  rescales of an hour spend it); the price spends rescales where they save most.
- A vertex is scaled down on its own only when that saves slots (or the subtask price); in a rescale that
  happens anyway, vertices above their need come down with it (``ride-along-down``). Every vertex's rule
  is in the decision (`Decision.vertex_rules`).
- With the latency objective (`LatencyTerms`, from mape/latency_policy.py) every vertex runs at least the
  greedy's cores for the target (``latency-floor``; a running configuration below a floor is not valid),
  and a scale-in must pay for its pause: the seconds over the target it causes (capacity/latency.py's
  closed form at the new configuration's utilization, its capacity taken `CAPACITY_ERROR` lower) within
  the budget the target allows since the last rescale; the first configuration from the chosen one up in
  5% steps that still saves and fits is taken, else the running one stays (``latency-spacing``; when the
  running one is no longer valid, no vertex comes down: ``keep-latency``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from capacity.dag import DagModel
from capacity.latency import seconds_over_target_after_pause
from mape.knowledge import Knowledge
from mape.plan import Proposal
from mape.proactive import carried_rps, carried_s, forecast_peak, planned_forecast
from mape.vertex_knowledge import VertexKnowledge, vertex_knowledge
from messages.types import Assessment, JobGraph
from recovery.predict import predict_recovery_s

SLOT_CPU = 0.95
"""CPU (cores) the subtasks of one slot may use at the target rate."""
RATE_STEP = 0.05
"""Each further candidate is sized for 5% more than the previous one."""
RATE_STEPS = 40
CAPACITY_ERROR = 0.1
"""Share by which a configuration the job has not run may carry less than the model says (the per-vertex
model's error at other configurations than the running one: median 7%, p90 13% on the twin's io-sink).
With the latency objective, configurations are sized to carry the forecast at that much less capacity, and
a scale-in's pause is priced at it: near saturation the cost grows as 1 / (1 − u)."""
DEFAULT_GROUP = "default"


def slots_needed(parallelism: Mapping[str, int], groups: Mapping[str, str] | None = None) -> int:
    """Slots a configuration needs with slot sharing: the largest parallelism per group, summed."""
    widest: dict[str, int] = {}
    for vertex, p in parallelism.items():
        group = (groups or {}).get(vertex, DEFAULT_GROUP)
        widest[group] = max(widest.get(group, 0), p)
    return sum(widest.values())


def taskmanagers_for(slots: int, slots_per_taskmanager: int) -> int:
    return max(1, math.ceil(slots / slots_per_taskmanager))


def largest_range_factor(parallelism: int, max_parallelism: int) -> float:
    """The largest key-group range's share over the even share 1 / p: ⌈M / p⌉ · p / M (1 where groups
    split evenly)."""
    return math.ceil(max_parallelism / parallelism) * parallelism / max_parallelism


@dataclass(frozen=True)
class VertexConfiguration:
    parallelism: dict[str, int]
    """Vertex id → parallelism."""
    rules: dict[str, str]
    capacity_rps: float
    """Source rate the configuration carries: its hottest subtask's or its fullest slot's limit."""
    slots: int


@dataclass(frozen=True)
class LatencyTerms:
    """What the latency objective (mape/latency_policy.py) adds to the per-vertex plan."""

    floors: Mapping[str, int]
    """Vertex id → the least parallelism whose queueing latency meets the target at the forecast peak."""
    slack_s: float
    """Target minus the latency the job shows without queueing: what a rescale's pause may add."""
    budget_s: float
    """Seconds over the target a voluntary rescale may cost now (the target's allowance since the last)."""
    reasons: tuple[str, ...] = ()


class Sizing:
    """Every vertex's capacity curve at 1..its top parallelism, and configurations sized from them."""

    def __init__(
        self,
        graph: JobGraph,
        dag: DagModel,
        max_slots: int,
        cpu_per_busy: float | Mapping[str, float],
        groups: Mapping[str, str] | None = None,
        reports_busy: frozenset[str] = frozenset(),
    ) -> None:
        self.graph = graph
        self.groups = groups or {}
        self.reports_busy = reports_busy
        """Vertices whose busy time Flink reports: one of them with no rate learned is nearly idle."""
        self.cpu_per_busy = {  # vertex id → CPU per busy second
            v.vertex_id: _cpu_or_one(
                cpu_per_busy.get(v.vertex_id, 1.0) if isinstance(cpu_per_busy, Mapping) else cpu_per_busy
            )
            for v in graph.vertices
        }
        ratios = dag.input_ratios(graph)
        self.dag, self.ratios = dag, ratios
        self._cpu: dict[tuple[str, int], np.ndarray] = {}
        self.curves: dict[str, np.ndarray] = {}
        self.kinds: dict[str, list[str]] = {}
        """Vertex id → where each parallelism's capacity comes from ('observed', 'nearest', …)."""
        self.known: dict[str, bool] = {}
        for vertex in graph.vertices:
            top = max(1, min(vertex.max_parallelism, max_slots))
            capacities, kinds = dag.capacity_curve(graph, vertex.vertex_id, ratios[vertex.vertex_id], top)
            capacities = np.array(capacities, dtype=float)
            learned = dag.vertices.get(vertex.vertex_id)
            if graph.keyed(vertex.vertex_id) and (learned is None or learned.key_loads is None):
                factors = [largest_range_factor(p, vertex.max_parallelism) for p in range(1, top + 1)]
                capacities = capacities / np.array(factors)
            self.curves[vertex.vertex_id] = capacities
            self.kinds[vertex.vertex_id] = list(kinds)
            self.known[vertex.vertex_id] = kinds[0] not in ("unknown",)
        self.units = self._forward_units()

    @property
    def any_known(self) -> bool:
        return any(self.known.values())

    def capacity(self, vertex_id: str, parallelism: int) -> float:
        curve = self.curves[vertex_id]
        return float(curve[min(parallelism, len(curve)) - 1]) if self.known[vertex_id] else math.inf

    def extrapolated(self, parallelism: Mapping[str, int]) -> bool:
        """Whether a vertex of rate learned runs at a parallelism never seen (its rate carried over)."""
        return any(
            self.known[vid] and self.kinds[vid][min(p, len(self.kinds[vid])) - 1] == "nearest"
            for vid, p in parallelism.items()
        )

    def cpu_per_record(self, vertex_id: str, parallelism: int) -> np.ndarray:
        """Per subtask, the CPU seconds one source record costs it (its busy seconds: its share over its
        rate, 0 unknown; times the vertex's CPU per busy second)."""
        key = (vertex_id, parallelism)
        if key not in self._cpu:
            vector = np.zeros(parallelism)
            if self.known[vertex_id]:
                rates, _ = self.dag.vertex_rates(self.graph, vertex_id, parallelism)
                shares = self.dag.shares(self.graph, vertex_id, parallelism)
                with np.errstate(divide="ignore", invalid="ignore"):
                    vector = np.where(rates > 0, self.ratios[vertex_id] * shares / rates, 0.0)
                vector = self.cpu_per_busy[vertex_id] * np.nan_to_num(vector, nan=0.0, posinf=0.0)
            self._cpu[key] = vector
        return self._cpu[key]

    def slot_cpu_per_record(self, parallelism: Mapping[str, int]) -> float:
        """The fullest slot's CPU seconds per source record: slot i holds subtask i of every vertex."""
        total = np.zeros(max(parallelism.values()))
        for vid, p in parallelism.items():
            vector = self.cpu_per_record(vid, p)
            total[: len(vector)] += vector
        return float(total.max())

    def evaluate(self, parallelism: Mapping[str, int], rules: Mapping[str, str] | None = None):
        """The configuration's capacity: its hottest subtask's limit and its fullest slot's CPU limit."""
        limits = [self.capacity(v, p) for v, p in parallelism.items()]
        per_record = self.slot_cpu_per_record(parallelism)
        cpu_limit = SLOT_CPU / per_record if per_record > 0 else math.inf
        return VertexConfiguration(
            dict(parallelism),
            dict(rules or {}),
            min([*limits, cpu_limit]),
            slots_needed(parallelism, self.groups),
        )

    def configuration(
        self, rate_rps: float, current: Mapping[str, int], floors: Mapping[str, int] | None = None
    ) -> VertexConfiguration:
        """The least parallelism per vertex that carries `rate_rps` (vertices of unknown rate stay), at
        least its floor (the latency objective's need)."""
        parallelism, rules = {}, {}
        for vertex in self.graph.vertices:
            vid = vertex.vertex_id
            if not self.known[vid]:
                parallelism[vid], rules[vid] = current.get(vid, vertex.parallelism), "keep-unknown-rate"
                continue
            curve = self.curves[vid]
            enough = np.flatnonzero(curve >= rate_rps)
            if len(enough):
                parallelism[vid] = int(enough[0]) + 1
                rules[vid] = "ds2-walk-keyed" if self.graph.keyed(vid) else "ds2-walk"
            else:
                parallelism[vid], rules[vid] = len(curve), "max-parallelism"
            floor = min((floors or {}).get(vid, 0), len(curve))
            if floor > parallelism[vid]:
                parallelism[vid], rules[vid] = floor, "latency-floor"
        self._follow_downstream(parallelism, rules)
        self._forward_pairs(parallelism, rules)
        least = dict(parallelism)
        self._fit_slots(parallelism, rules, rate_rps)
        fewer = self._fewer_slots(least, parallelism, rate_rps)
        if fewer is not None:
            for vid, p in fewer.items():
                if p != parallelism[vid]:
                    rules[vid] = "slot-placement"
            parallelism = fewer
        return self.evaluate(parallelism, rules)

    def _follow_downstream(self, parallelism: dict[str, int], rules: dict[str, str]) -> None:
        """A vertex of unknown rate that reports no busy time (a legacy source) runs as wide as the widest
        vertex it feeds: its work, unseen by the model, then spreads over as many slots as the job has. One
        that reports busy time yet has no rate learned is nearly idle (or waits on backpressure) and keeps
        its parallelism."""
        for vertex in reversed(self.graph.vertices):
            vid = vertex.vertex_id
            fed = [parallelism[e.target_id] for e in self.graph.outputs(vid)]
            if not self.known[vid] and fed and vid not in self.reports_busy:
                parallelism[vid] = min(max(fed), len(self.curves[vid]))
                rules[vid] = "follow-downstream"

    def _forward_pairs(self, parallelism: dict[str, int], rules: dict[str, str]) -> None:
        """Every forward unit at its widest vertex's parallelism, but no wider than its limit: Flink runs a
        forward edge only between equal parallelisms, and rejects a vertex above its max parallelism."""
        for unit in self.units:
            both = min(max(parallelism[vid] for vid in unit), self._unit_limit(unit))
            for vid in unit:
                if parallelism[vid] != both:
                    parallelism[vid], rules[vid] = both, "forward-edge"

    def _unit_limit(self, unit: tuple[str, ...]) -> int:
        """The widest a forward unit may run: its vertices' smallest top parallelism (max parallelism, or
        the slots the job may have)."""
        return min(len(self.curves[vid]) for vid in unit)

    def _fit_slots(self, parallelism: dict[str, int], rules: dict[str, str], rate_rps: float) -> None:
        """Add subtasks until the shared slot's core fits, a whole forward unit at a time (its ends stay
        equal) and within its limit: first where a unit runs fewer subtasks than there are slots (no new
        slot), the one that relieves the slot most; then the widest."""
        if not math.isfinite(rate_rps) or rate_rps <= 0:
            return
        fits = SLOT_CPU / rate_rps  # the CPU seconds per record a slot may take
        while (fullest := self.slot_cpu_per_record(parallelism)) > fits:
            slots = max(parallelism.values())
            relief = {}
            for unit in self.units:
                p = max(parallelism[vid] for vid in unit)
                if p < self._unit_limit(unit):
                    wider = {**parallelism, **dict.fromkeys(unit, p + 1)}
                    relief[unit] = fullest - self.slot_cpu_per_record(wider)
            relief = {unit: r for unit, r in relief.items() if r > 1e-12}
            if not relief:
                return
            free = [unit for unit in relief if max(parallelism[vid] for vid in unit) < slots]
            unit = max(free or relief, key=lambda u: relief[u])
            p = max(parallelism[vid] for vid in unit) + 1
            for vid in unit:
                parallelism[vid], rules[vid] = p, "slot-cpu"

    def _fewer_slots(
        self, least: Mapping[str, int], fitted: Mapping[str, int], rate_rps: float
    ) -> dict[str, int] | None:
        """A configuration whose slots all fit on fewer slots than `fitted` (on any number up to the top
        when `fitted` does not fit: adding subtasks got stuck), found by placing subtasks: slot i holds
        subtask i of every vertex, so a vertex running fewer subtasks than there are slots leaves the last
        slots to the others (a hot key's subtask may get a slot of its own). The fewest slots, bisected
        between what the vertices' needs allow and that bound, on which a coordinate descent over the
        vertices' parallelism (each at least `least`, forward-paired vertices together) fits; None when
        none in range does."""
        if not math.isfinite(rate_rps) or rate_rps <= 0 or len(set(self.groups.values())) > 1:
            return None
        fits = SLOT_CPU / rate_rps
        above = max(fitted.values())
        if self.slot_cpu_per_record(fitted) > fits:
            above = max(len(curve) for curve in self.curves.values()) + 1
        units = self.units
        low, high = max(least.values()), above - 1
        found = self._descend(least, units, high, rate_rps, fits) if low <= high else None
        while found is not None and low < high:  # bisection: more slots rarely fit worse
            middle = (low + high) // 2
            fewer = self._descend(least, units, middle, rate_rps, fits)
            if fewer is None:
                low = middle + 1
            else:
                found, high = fewer, middle
        return found

    def _forward_units(self) -> list[tuple[str, ...]]:
        """Vertices that must run at one parallelism: those joined by forward edges."""
        unit_of = {v.vertex_id: (v.vertex_id,) for v in self.graph.vertices}
        for edge in self.graph.edges:
            apart = unit_of[edge.source_id] != unit_of[edge.target_id]  # once each: a vertex loads once
            if edge.ship_strategy.upper() == "FORWARD" and apart:
                joined = unit_of[edge.source_id] + unit_of[edge.target_id]
                for vid in joined:
                    unit_of[vid] = joined
        return list(dict.fromkeys(unit_of.values()))

    def _descend(self, least, units, slots, rate_rps, fits, passes: int = 4) -> dict[str, int] | None:
        """The descent on `slots` slots, from every vertex as wide as it may be: each unit in turn moves to
        the parallelism that leaves the fullest slot emptiest (then the slots' sum of squares; the fewest
        subtasks on ties), until the slots fit or nothing moves. A unit with a vertex of unknown rate keeps
        its parallelism."""
        choices: dict[tuple[str, ...], list[int]] = {}
        for unit in units:
            lowest = max(least[vid] for vid in unit)
            if not all(self.known[vid] for vid in unit):
                choices[unit] = [lowest] if lowest <= slots else []
            else:
                top = min(slots, self._unit_limit(unit))  # never above a vertex's max parallelism
                choices[unit] = [
                    p for p in range(lowest, top + 1) if all(self.capacity(v, p) >= rate_rps for v in unit)
                ]
            if not choices[unit]:
                return None
        loads = {unit: self._unit_loads(unit, choices[unit], slots) for unit in units}  # choice × slot
        at = {unit: len(choices[unit]) - 1 for unit in units}  # every unit as wide as it may be
        total = sum(loads[unit][at[unit]] for unit in units)
        for _ in range(passes):
            moved = False
            for unit in units:
                candidates = total - loads[unit][at[unit]] + loads[unit]
                # the fullest slot emptiest, then the slots' squares (no plateaus), then fewest subtasks
                best = int(np.lexsort(((candidates**2).sum(axis=1), candidates.max(axis=1)))[0])
                if best != at[unit]:
                    total, at[unit], moved = candidates[best], best, True
            if total.max() <= fits:
                return {vid: choices[unit][at[unit]] for unit in units for vid in unit}
            if not moved:
                return None
        return None

    def _unit_loads(self, unit: tuple[str, ...], choices: list[int], slots: int) -> np.ndarray:
        """Row k: the CPU seconds per source record the unit's subtasks put on each slot at choices[k]."""
        loads = np.zeros((len(choices), slots))
        for k, p in enumerate(choices):
            for vid in unit:
                vector = self.cpu_per_record(vid, p)
                loads[k, : len(vector)] += vector
        return loads


class VertexPolicy:
    """foresail per vertex; proposes a whole configuration (`Proposal.vertex_parallelism`)."""

    name = "foresail"

    def __init__(
        self,
        min_taskmanagers: int,
        max_taskmanagers: int,
        recovery_target_s: float,
        loop_interval_s: float,
        necessary_window_s: float = 600.0,
        slots_per_taskmanager: int = 1,
        slot_sharing_groups: Mapping[str, str] | None = None,
        subtask_price: float = 0.0,
        surge_drain_s: float = 120.0,
        scale_out_lookahead_s: float = math.inf,
        max_rescales_per_h: float | None = None,
        max_scale_in_share: float | None = None,
        rescale_price_ws: float = 0.0,
    ) -> None:
        self.scale_out_lookahead_s = scale_out_lookahead_s if max_rescales_per_h is None else math.inf
        """A scale-out is sized for the forecast peak of this long (the earliest the plan may replace it;
        under a rescale budget, the whole horizon's: it may have to stand that long); a scale-in, for the
        whole horizon's."""
        self.max_rescales_per_h = max_rescales_per_h
        self.rescale_price_ws = rescale_price_ws
        """TaskManager-seconds one rescale is worth avoiding (0: every rescale that saves a slot is made)."""
        self.max_scale_in_share = max_scale_in_share
        """Largest share of the running configuration's capacity one scale-in gives up (None: no limit)."""
        self.min_taskmanagers = min_taskmanagers
        self.max_taskmanagers = max_taskmanagers
        self.recovery_target_s = recovery_target_s
        self.loop_interval_s = loop_interval_s
        self.necessary_window_s = necessary_window_s
        self.slots_per_taskmanager = slots_per_taskmanager
        self.slot_sharing_groups = dict(slot_sharing_groups or {})
        """Vertex name → group."""
        self.subtask_price = subtask_price
        self.surge_drain_s = surge_drain_s

    def _context(self, a: Assessment, knowledge: Knowledge, latency: LatencyTerms | None) -> _Context | None:
        state = vertex_knowledge(knowledge)
        graph = state.graph if state is not None else None
        if graph is None or not a.vertices:
            return None
        groups = {
            v.vertex_id: self.slot_sharing_groups[v.name]
            for v in graph.vertices
            if v.name in self.slot_sharing_groups
        }
        max_slots = self.max_taskmanagers * self.slots_per_taskmanager
        reports_busy = frozenset(v.vertex_id for v in a.vertices if math.isfinite(v.utilization))
        return _Context(
            state,
            {v.vertex_id: v.parallelism for v in graph.vertices},
            {v.vertex_id: v.name for v in graph.vertices},
            Sizing(graph, knowledge.dag, max_slots, state.vertex_cpu_per_busy(), groups, reports_busy),
            dict(latency.floors) if latency is not None else {},
            latency.reasons if latency is not None else (),
            self.slots_per_taskmanager,
        )

    def urgent(
        self, assessment: Assessment, knowledge: Knowledge, latency: LatencyTerms | None = None
    ) -> Proposal | None:
        """The surge rule per vertex: the load of the last seconds left the previous forecast's upper
        bound and exceeds what the running configuration carries. Every vertex is sized at once (none comes
        down) for that load or the next loop's forecast, whichever is higher, plus the backlog and what
        piles up during the pause, drained within `surge_drain_s`. None when there is no surge."""
        context = self._context(assessment, knowledge, latency)
        return self._surge(assessment, context) if context is not None else None

    def _surge(self, a: Assessment, context: _Context) -> Proposal | None:
        recent, expected = a.workload_recent_rps, a.expected_upper_rps
        if not context.sizing.any_known or not math.isfinite(recent):
            return None
        current, sizing = context.current, context.sizing
        running = _running(a, sizing, current)
        if not recent > running.capacity_rps or (math.isfinite(expected) and recent <= expected):
            return None
        now = a.surge_load_rps
        level = max(now, forecast_peak(planned_forecast(a), self.loop_interval_s))
        piled_up = a.backlog_records + now * context.state.downtime.estimate("out")
        needed = level + piled_up / self.surge_drain_s
        config = sizing.configuration(needed, current, context.floors)
        # none comes down, but none stays above what it may run at (its max parallelism, the slots allowed)
        merged = {v: max(p, min(current[v], len(sizing.curves[v]))) for v, p in config.parallelism.items()}
        if not any(merged[v] > current[v] for v in merged):  # a clamp alone is no surge: the regular plan's
            return None
        rules = {}
        for v, p in merged.items():
            if p > current[v]:
                rules[v] = config.rules[v]
            else:
                rules[v] = "keep" if p == current[v] else "max-parallelism"
        target = sizing.evaluate(merged, rules)
        seen = "no earlier upper bound" if not math.isfinite(expected) else f"upper bound {expected:.0f}"
        return context.proposal(
            target,
            "vertex-surge",
            f"load {recent:.0f} rps over the last seconds > {seen} and > the running configuration's "
            f"{running.capacity_rps:.0f}",
            f"sized for {needed:.0f} rps: {level:.0f} plus {piled_up:.0f} records drained within "
            f"{self.surge_drain_s:.0f} s",
        )

    def propose_configuration(
        self, assessment: Assessment, knowledge: Knowledge, latency: LatencyTerms | None = None
    ) -> Proposal:
        a = assessment
        context = self._context(a, knowledge, latency)
        if context is None:
            return Proposal(
                a.current_scaleout, "vertex-no-graph", ("no job graph or per-vertex metrics yet",)
            )
        state, current, sizing, floors = context.state, context.current, context.sizing, context.floors
        proposal = context.proposal
        running = _running(a, sizing, current)
        if not sizing.any_known:
            return proposal(running, "vertex-no-rates", "no vertex's true rate is known yet")
        surge = self._surge(a, context)
        if surge is not None:
            return surge
        forecast = planned_forecast(a)
        average, horizon_max = a.workload_avg_rps, float(forecast.max())
        next_loop = forecast_peak(forecast, self.loop_interval_s)
        load = (
            f"average {average:.0f} rps, forecast max {next_loop:.0f} next loop / {horizon_max:.0f} horizon"
        )
        now = f"running configuration carries {running.capacity_rps:.0f} rps on {running.slots} slots"

        since = math.inf if knowledge.last_rescale_s is None else a.time_s - knowledge.last_rescale_s
        drain_s = predict_recovery_s(running.capacity_rps, forecast, a.backlog_records, 0.0, 0.0)
        if (
            since < self.necessary_window_s
            and running.capacity_rps > max(average, next_loop)
            and drain_s <= self.loop_interval_s
        ):
            return proposal(running, "vertex-only-if-necessary", f"rescaled {since:.0f} s ago", now, load)

        margin = CAPACITY_ERROR if latency is not None else 0.0
        known = (sizing, current, forecast, a.backlog_records, state.downtime, floors, margin)
        chosen, rule, why = self._candidate(*known, self.scale_out_lookahead_s, average)
        if self.rescale_price_ws > 0 and chosen.slots > running.slots:
            chosen, rule, why = self._priced_scale_out(known, average, forecast, (chosen, rule, why))
        if chosen.slots <= running.slots:  # no scale-out: what comes down must carry the whole horizon
            # beside the horizon's forecast it must carry the next loop's upper bound (as at job granularity):
            # before the first model that bound is the fallback window's peak, which a falling load's linear
            # trend leaves behind (on the twin's session job × tm a cold start scaled every vertex in to 1
            # subtask at 290 rps, then spent 6 minutes over the SLO behind the ramp that followed)
            floor_rps = carried_rps(a, self.loop_interval_s)
            chosen, rule, why = self._candidate(*known, math.inf, floor_rps)
            chosen, why = self._limit_scale_in(context, running, chosen, why)
        running_valid = (  # Daedalus: the current scale-out needs only carry the load until recovered
            running.capacity_rps > average
            and drain_s <= self.recovery_target_s
            and running.capacity_rps >= forecast_peak(forecast, max(drain_s, self.loop_interval_s))
            and all(current.get(v, k) >= k for v, k in floors.items())
        )
        catching_up = a.backlog_records > chosen.capacity_rps * self.loop_interval_s
        # a scale-in under the latency objective must pay for its pause (else nothing comes down)
        shrinking = self._saves(running, chosen) if running_valid else chosen.slots < running.slots
        too_costly = False
        if latency is not None and shrinking and not catching_up:
            pause_s = state.downtime.estimate("in")
            affordable = self._affordable(context, chosen, running, max(average, next_loop), latency, pause_s)
            if affordable is None:
                too_costly = True
                held = (
                    f"after a {pause_s:.1f} s pause any smaller configuration would be late longer than the "
                    f"{latency.budget_s:.0f} s the target allows since the last rescale: nothing comes down"
                )
            else:
                chosen, over_s = affordable
                why += f"; its pause costs ~{over_s:.0f} s over the latency target"
        if running_valid:
            if too_costly:
                return proposal(
                    running, "latency-spacing", now, load, held, rules=dict.fromkeys(current, "keep-latency")
                )
            saves = self._saves(running, chosen) and not catching_up
            saved_ws = self._scale_in_saving_ws(running, chosen, forecast) if saves else 0.0
            if saves and saved_ws < self.rescale_price_ws:
                return proposal(
                    running,
                    "vertex-rescale-not-worth-it",
                    now,
                    load,
                    f"candidate: {chosen.slots} slots saves {saved_ws:.0f} TaskManager-s over the horizon, "
                    f"less than a rescale's price of {self.rescale_price_ws:g}",
                    rules=dict.fromkeys(current, "keep-not-worth-it"),
                )
            if saves:
                budget_spent = knowledge.rescale_budget_spent(a.time_s, self.max_rescales_per_h)
                if budget_spent:
                    return proposal(
                        running,
                        "vertex-rescale-budget",
                        now,
                        load,
                        f"candidate: {chosen.slots} slots ({why})",
                        budget_spent,
                        rules=dict.fromkeys(current, "keep-rescale-budget"),
                    )
                target = sizing.evaluate(chosen.parallelism, _labelled(chosen, current, "scale-down"))
                return proposal(target, rule, why, now, load, "needs fewer slots")
            return proposal(
                running,
                "vertex-current-valid",
                now,
                load,
                f"candidate: {chosen.slots} slots ({why})",
                rules={
                    v: "keep" if chosen.parallelism[v] >= p else "keep-no-saving" for v, p in current.items()
                },
            )
        # nothing comes down while a backlog is worked off, or when shrinking costs more than the target allows
        keep = "keep-catching-up" if catching_up else "keep-latency" if too_costly else None
        merged = dict(chosen.parallelism)
        rules = dict(chosen.rules)
        if keep is not None:
            for vid, p in current.items():
                if merged[vid] < p:
                    merged[vid], rules[vid] = p, keep
        if too_costly and merged == current:
            return proposal(running, "latency-spacing", now, load, held, rules=dict.fromkeys(current, keep))
        target = sizing.evaluate(merged, rules)
        target = sizing.evaluate(merged, _labelled(target, current, "ride-along-down"))
        return proposal(target, rule, why, now, load)

    def _candidate(
        self,
        sizing,
        current,
        forecast,
        backlog,
        downtime,
        floors,
        margin=0.0,
        lookahead_s=math.inf,
        floor_rps=0.0,
    ) -> tuple[VertexConfiguration, str, str]:
        """The configuration for the forecast peak of the next `lookahead_s` (at least `floor_rps`), raised
        until it recovers within the target; with a `margin`, sized so that it still carries the peak when
        it carries that share less than modelled."""
        floor_rps = floor_rps if math.isfinite(floor_rps) else 0.0
        peak = max(forecast_peak(forecast, lookahead_s), floor_rps) / (1.0 - margin)
        for step in range(RATE_STEPS + 1):
            rate = peak * (1 + RATE_STEP * step)
            config = sizing.configuration(rate, current, floors)
            grows = any(p > current.get(v, 0) for v, p in config.parallelism.items())
            downtime_s = downtime.estimate("out" if grows else "in")
            recovery_s = predict_recovery_s(config.capacity_rps, forecast, backlog, 0.0, downtime_s)
            if recovery_s <= self.recovery_target_s and config.capacity_rps >= forecast_peak(
                forecast, recovery_s
            ):
                within = "the horizon" if math.isinf(lookahead_s) else f"the next {lookahead_s:.0f} s"
                why = (
                    f"sized for {rate:.0f} rps (forecast peak of {within} +{RATE_STEP * step:.0%}"
                    + (f", ÷ {1 - margin:.2f} for the model's error" if margin else "")
                    + "): carries "
                    f"{config.capacity_rps:.0f} rps, recovery {recovery_s:.0f} s (downtime {downtime_s:.1f} s)"
                )
                return config, "vertex-long-lived", why
        config = sizing.configuration(math.inf, current, floors)
        return config, "vertex-max", "no configuration recovers within the target: the largest"

    def _limit_scale_in(
        self, context: _Context, running: VertexConfiguration, chosen: VertexConfiguration, why: str
    ) -> tuple[VertexConfiguration, str]:
        """`chosen`, or where it runs a vertex at a parallelism never seen and gives up more than
        `max_scale_in_share` of the running configuration's capacity, the configuration for what that
        leaves: a rate carried over from another parallelism over-promises for a vertex whose cost grows
        with the keys each subtask holds."""
        share = self.max_scale_in_share
        if share is None:
            return chosen, why
        floor_rps = (1.0 - share) * running.capacity_rps
        if chosen.capacity_rps >= floor_rps or not context.sizing.extrapolated(chosen.parallelism):
            return chosen, why
        limited = context.sizing.configuration(floor_rps, context.current, context.floors)
        return limited, (
            f"{why}; a scale-in gives up at most {share:.0%} of the running {running.capacity_rps:.0f} rps: "
            f"sized for {floor_rps:.0f} rps"
        )

    def _affordable(
        self, context: _Context, chosen, running, load_rps, latency, pause_s
    ) -> tuple[VertexConfiguration, float] | None:
        """From `chosen` up in 5% steps, the first configuration that still saves and whose pause costs no
        more seconds over the latency target than the budget (a roomier one catches up sooner)."""
        for step in range(RATE_STEPS + 1):
            rate_rps = chosen.capacity_rps * (1 + RATE_STEP * step)
            config = (
                chosen
                if step == 0
                else context.sizing.configuration(rate_rps, context.current, context.floors)
            )
            if not self._saves(running, config):
                return None
            carries_rps = config.capacity_rps * (1.0 - CAPACITY_ERROR)
            utilization = load_rps / carries_rps if carries_rps > 0 else math.inf
            over_s = seconds_over_target_after_pause(pause_s, latency.slack_s, utilization)
            if over_s <= latency.budget_s:
                return config, over_s
        return None

    def _scale_in_saving_ws(
        self, running: VertexConfiguration, chosen: VertexConfiguration, forecast: np.ndarray
    ) -> float:
        """TaskManager-seconds a scale-in saves over the forecast horizon: the TaskManagers it frees, or the
        subtasks it sheds at their price. Only the horizon counts (what the forecast knows), so a price
        above the horizon's seconds is a dead band: scale-ins that free fewer than price / horizon
        TaskManagers are not made (with 1,200 and 900 s, a single one), however long the surplus stands."""
        freed = max(self._tms(running) - self._tms(chosen), _shed(running, chosen) * self.subtask_price)
        return freed * len(forecast)

    def _priced_scale_out(
        self, known: tuple, average: float, forecast: np.ndarray, first: tuple[VertexConfiguration, str, str]
    ) -> tuple[VertexConfiguration, str, str]:
        """With a rescale price: among the scale-outs sized for the forecast peak of ever longer lookaheads
        (one loop apart, from the next decision's to the horizon's), the first step of the cheapest
        sequence of rescales over the horizon: each configuration costs its TaskManagers for as long as it
        carries the forecast, and each rescale after the first the price. A rescale pauses the job for
        seconds, so growing in steps is right for a short rise; a long one is cheaper in fewer, larger ones
        (charging every remainder at the horizon's configuration, as before, sized the first step of a
        rise over an hour at 17 TaskManagers where the cheapest sequence starts at 9)."""
        horizon_s = float(len(forecast))
        if (
            not math.isfinite(self.scale_out_lookahead_s)
            or carried_s(first[0].capacity_rps, forecast) >= horizon_s
        ):
            return first  # already sized for the horizon (a budget), or it carries it anyway
        peaks = np.maximum.accumulate(forecast)  # the peak of the first k + 1 seconds
        options, lookahead_s = [first], self.scale_out_lookahead_s + self.loop_interval_s
        while lookahead_s < horizon_s:
            if peaks[math.ceil(lookahead_s) - 1] > options[-1][0].capacity_rps:  # the last one falls short
                option = self._candidate(*known, lookahead_s, average)
                if option[0].parallelism == options[-1][0].parallelism:
                    break  # at the largest configuration: every longer lookahead gets it too
                options.append(option)
            lookahead_s += self.loop_interval_s
        options.append(self._candidate(*known, math.inf, average))
        costs = self._sequence_costs_ws([o[0] for o in options], forecast)
        best = min(range(len(options)), key=costs.__getitem__)  # the first of equal cost: the smallest
        if best == 0:
            return first
        config, rule, why = options[best]
        return config, rule, f"{why}; {costs[best]:.0f} TaskManager-s over the horizon, rescales included"

    def _sequence_costs_ws(self, configs: list[VertexConfiguration], forecast: np.ndarray) -> list[float]:
        """For each configuration taken now, the TaskManager-seconds of the cheapest sequence that follows
        it over the horizon: each one runs until the forecast outgrows it (then the next step, at the
        rescale price), the last until the horizon (or for good, if none carries further)."""
        horizon_s = float(len(forecast))
        lasts_s = [min(carried_s(c.capacity_rps, forecast), horizon_s) for c in configs]
        tms = [self._tms(c) for c in configs]
        after_ws = [0.0] * len(configs)  # the cheapest cost from when configuration i runs out
        for i in sorted(range(len(configs)), key=lasts_s.__getitem__, reverse=True):
            if lasts_s[i] >= horizon_s:
                continue
            after_ws[i] = min(
                (
                    self.rescale_price_ws + tms[j] * (lasts_s[j] - lasts_s[i]) + after_ws[j]
                    for j in range(len(configs))
                    if lasts_s[j] > lasts_s[i]  # computed already: the loop goes from the longest-lasting
                ),
                default=tms[i] * (horizon_s - lasts_s[i]),  # nothing carries further: it stays
            )
        return [tms[i] * lasts_s[i] + after_ws[i] for i in range(len(configs))]

    def _tms(self, config: VertexConfiguration) -> int:
        return taskmanagers_for(config.slots, self.slots_per_taskmanager)

    def _saves(self, running: VertexConfiguration, chosen: VertexConfiguration) -> bool:
        """Whether moving to `chosen` saves slots, or sheds subtasks worth a TaskManager at the price."""
        if chosen.slots < running.slots:
            return True
        return self.subtask_price > 0 and _shed(running, chosen) * self.subtask_price >= 1.0


def _shed(running: VertexConfiguration, chosen: VertexConfiguration) -> int:
    """Subtasks a move from `running` to `chosen` removes over all vertices."""
    return sum(running.parallelism.values()) - sum(chosen.parallelism.values())


@dataclass
class _Context:
    """What one plan step knows of the job: the graph's running parallelism, the sizing, the objective."""

    state: VertexKnowledge
    current: dict[str, int]
    names: dict[str, str]
    sizing: Sizing
    floors: dict[str, int]
    objective: tuple[str, ...]
    slots_per_taskmanager: int

    def proposal(self, config: VertexConfiguration, rule: str, *reasons: str, rules=None) -> Proposal:
        by_vertex = rules or config.rules
        described = ", ".join(
            f"{self.names[v]} {self.current[v]}→{p} ({by_vertex[v]})" for v, p in config.parallelism.items()
        )
        return Proposal(
            taskmanagers_for(config.slots, self.slots_per_taskmanager),
            rule,
            (*self.objective, *reasons, described),
            vertex_parallelism=dict(config.parallelism),
            vertex_rules=dict(by_vertex),
            current_vertex_parallelism=self.current,
            current_taskmanagers=taskmanagers_for(
                slots_needed(self.current, self.sizing.groups), self.slots_per_taskmanager
            ),
        )


def _running(a: Assessment, sizing: Sizing, current: Mapping[str, int]) -> VertexConfiguration:
    """The running configuration; when the job is saturated, carrying no more than the throughput it shows
    (a measurement beats the model, whose rates a saturated slot does not teach)."""
    running = sizing.evaluate(current, dict.fromkeys(current, "keep"))
    measured = a.capacities_rps.get(a.current_scaleout, math.inf)
    if a.capacity_method == "saturated" and measured < running.capacity_rps:
        return replace(running, capacity_rps=measured)
    return running


def _cpu_or_one(cpu_per_busy: float) -> float:
    """A CPU per busy second to plan with: 1 (a busy second is a second of the core) until learned."""
    return cpu_per_busy if math.isfinite(cpu_per_busy) and cpu_per_busy > 0 else 1.0


def _labelled(config: VertexConfiguration, current: Mapping[str, int], down: str) -> dict[str, str]:
    """The configuration's rules, with 'keep' where nothing changes and `down` where a vertex comes down."""
    rules = dict(config.rules)
    for vid, p in config.parallelism.items():
        if p == current.get(vid):
            rules[vid] = "keep"
        elif p < current.get(vid, p):
            rules[vid] = down
    return rules
