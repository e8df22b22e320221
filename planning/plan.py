"""The capacity plan: explore the testbed, invert the surrogate at 110% of the requested rate at every
memory profile, keep the fewest slots (then the least memory), and size the vertices from the per-vertex
true rates of the largest measured configuration at that memory. Our extensions divide the surrogate by
what the runs say about large parallelisms: the hottest slot's key-group imbalance (planning/skew.py,
resolved by a census if one ran: planning/census.py), the per-record work that splits with the state
(planning/state_cost.py), and how much the hosts differ in speed (planning/speeds.py: the runs are read at
a mean host's pace, and new hosts are drawn with the testbed's spread)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from planning.bids2 import VertexRate, needed_parallelism
from planning.census import take_census
from planning.estimator import Estimate, EstimatorSettings, estimate_mst
from planning.explorer import Exploration, ExplorerSettings, explore
from planning.released_fit import OVERPROVISION
from planning.skew import QUANTILE, SkewModel, skew_model
from planning.speeds import SlotSpeeds, slot_speeds
from planning.state_cost import StateCost, VertexCost, state_cost
from planning.surrogate import Observation, Surrogate, fit, select_model
from planning.testbed import PhaseReading, Testbed


@dataclass(frozen=True)
class CapacityPlan:
    target_rate_rps: float
    slots: int
    memory_mb: float
    task_managers: int
    slots_per_task_manager: int
    vertex_parallelism: dict[str, int]
    """Per vertex (sources excluded), the least parallelism for 110% of the target at the measured true
    rates: the vertex-granularity requirement."""
    predicted_mst_rps: float
    predicted_mst_sd_rps: float
    model: str
    coefficients: dict[str, float]
    slots_per_memory: dict[float, int | None]
    exploration: Exploration
    surrogate: Surrogate
    """The model the plan inverted: the exploration's, or with our extensions its refit on what each run
    would carry balanced and at the large-parallelism cost per record."""
    imbalance: float
    """Hottest slot's load over the mean slot's at the planned slots (1.0 without the skew model)."""

    skew: SkewModel | None = None
    census: PhaseReading | None = None
    """The key-group census the skew model used (planning/census.py), if one ran."""
    state_cost: StateCost | None = None
    """Per-record work that shrinks with the parallelism (planning/state_cost.py), where the runs show it."""

    def divisor(self, slots: int) -> float:
        """What the surrogate's prediction is divided by at `slots` (1.0: the paper's plan)."""
        return divisor_at(self.skew, self.state_cost, slots)

    def predict_rps(self, slots: int, memory_mb: float) -> float:
        """The plan's MST prediction at any configuration."""
        return self.surrogate.predict(slots, memory_mb) / self.divisor(slots)

    def to_dict(self) -> dict[str, object]:
        """The plan as JSON: every measurement with its tests."""
        e = self.exploration
        return {
            "target_rate_rps": self.target_rate_rps,
            "overprovision": OVERPROVISION,
            "slots": self.slots,
            "memory_mb_per_slot": self.memory_mb,
            "task_managers": self.task_managers,
            "slots_per_task_manager": self.slots_per_task_manager,
            "vertex_parallelism": self.vertex_parallelism,
            "predicted_mst_rps": self.predicted_mst_rps,
            "predicted_mst_sd_rps": self.predicted_mst_sd_rps,
            "model": self.model,
            "coefficients": self.coefficients,
            "skew_quantile": self.skew.quantile if self.skew is not None else None,
            "key_group_census": _census(self.census) if self.census is not None else None,
            "state_cost_us_per_record": _state_cost(self.state_cost) if self.state_cost is not None else None,
            "host_speeds": _speeds(self.skew.speeds) if self.skew and self.skew.speeds else None,
            "imbalance_at_plan": self.imbalance,
            "slots_per_memory_mb": {f"{m:g}": s for m, s in self.slots_per_memory.items()},
            "model_selection_rmse": e.selection_rmse,
            "loo_rmse_history": list(e.rmse_history),
            "stopped_because": e.stopped_because,
            "testbed_s": sum(m.testbed_s for m in e.estimates),
            "measurements": [_measurement(m) for m in e.estimates],
        }


def _measurement(estimate: Estimate) -> dict[str, object]:
    return {
        "slots": estimate.slots,
        "memory_mb": estimate.memory_mb,
        "mst_rps": estimate.mst_rps,
        "testbed_s": estimate.testbed_s,
        "tests": [
            {"rate_rps": t.rate_rps, "passed": t.passed, **_reading(t.reading)} for t in estimate.tests
        ],
    }


def _census(reading: PhaseReading) -> dict[str, object]:
    return {
        "rate_rps": reading.injected_rps,
        "key_group_shares": {v.name: v.subtask_shares for v in reading.vertices if v.key_groups > 0},
    }


def _state_cost(cost: StateCost) -> dict[str, dict[str, float]]:
    return {v.name: {"fixed": 1e6 * v.fixed_s, "split_over_n": 1e6 * v.split_s} for v in cost.vertices}


def _speeds(speeds: SlotSpeeds) -> dict[str, object]:
    return {"relative_per_slot": list(speeds.speeds), "log_sd": speeds.log_sd}


def _reading(reading) -> dict[str, object]:
    data = asdict(reading)
    data.pop("injected_rps")
    data["vertices"] = [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in vertex.items()}
        for vertex in data["vertices"]
    ]
    return data


class PlanError(ValueError):
    """The surrogate never reaches the requested rate (one line saying so)."""


def vertex_rates(estimate: Estimate, slowest: bool = False) -> list[VertexRate]:
    """Non-source vertices with a busyness reading, from the estimate's last passed test: the mean
    subtask's true rate (DS2's, StreamBed's) or with `slowest` the slowest subtask's where the input is
    spread evenly (a keyed vertex's hottest subtask is sized on its key-group share instead: the slowest
    subtask there is the hottest one's, and both at once would count the skew twice)."""
    final = estimate.final
    source_rps = final.achieved_rps
    rates = [
        (v, v.slowest_true_rate_rps if slowest and not v.key_groups else v.true_rate_rps)
        for v in final.vertices[1:]
    ]
    return [
        VertexRate(v.name, rate, v.input_rps / source_rps)
        for v, rate in rates
        if source_rps > 0 and math.isfinite(rate) and rate > 0
    ]


def make_plan(
    testbed: Testbed,
    target_rate_rps: float,
    explorer: ExplorerSettings,
    estimator: EstimatorSettings | None = None,
    slots_per_task_manager: int = 1,
    max_slots: int = 100_000,
    progress: Callable[[Estimate], None] | None = None,
    skew_quantile: float | None = QUANTILE,
    key_census: bool = False,
) -> CapacityPlan:
    """Explore the testbed and plan; `skew_quantile` None plans as StreamBed does (no key-group skew
    model), else provisions for that quantile of the imbalance (planning/skew.py); `key_census` first
    measures every key group's load (planning/census.py; the testbed must deploy that many slots)."""

    def measure(slots: int, memory_mb: float) -> Estimate:
        estimate = estimate_mst(testbed, slots, memory_mb, estimator)
        if progress is not None:
            progress(estimate)
        return estimate

    exploration = explore(measure, explorer)
    census = None
    if key_census and skew_quantile is not None:
        memory_mb = max(explorer.memory_mb)
        census = take_census(
            testbed, exploration.estimates, memory_mb, estimator or EstimatorSettings(), max_slots
        )
    return plan_from(
        exploration, target_rate_rps, explorer, slots_per_task_manager, max_slots, skew_quantile, census
    )


def _rate(rate_rps: float) -> str:
    """A rate for a line of text: digit groups, or 3 significant digits where they would run to 300."""
    return f"{rate_rps:,.0f}" if abs(rate_rps) < 1e15 else f"{rate_rps:.3g}"


def vertex_parallelism(
    rates: list[VertexRate],
    rate_rps: float,
    measured_at: int,
    skew: SkewModel | None,
    cost: StateCost | None,
    max_parallelism: int,
) -> dict[str, int]:
    """Per vertex the least parallelism whose hottest subtask carries `rate_rps` (one task per slot, as
    in BIDS2): DS2's p = rate · ratio / true rate where neither extension applies, else the true rate
    measured at `measured_at` carried to p by the state cost, over the hottest subtask's share at p from
    the key-group loads (max parallelism where none suffices)."""
    needs = {}
    for vertex, least in zip(rates, needed_parallelism(rates, rate_rps), strict=True):
        loads = skew.loads.get(vertex.name) if skew is not None else None
        work = cost.vertex(vertex.name) if cost is not None else None
        if loads is None and (work is None or work.split_s == 0):
            needs[vertex.name] = least
            continue
        top = min(max_parallelism, len(loads.mean)) if loads is not None else max_parallelism
        keyed = skew if loads is not None else None
        needs[vertex.name] = next(
            (p for p in range(1, top + 1) if _carried_rps(vertex, p, measured_at, keyed, work) >= rate_rps),
            top,
        )
    return needs


def _carried_rps(
    vertex: VertexRate, parallelism: int, measured_at: int, keyed: SkewModel | None, work: VertexCost | None
) -> float:
    """The source rate at which the vertex's hottest subtask is busy all the time (a keyed vertex's: its
    key-group share, paced by the hosts)."""
    true_rps = vertex.true_rate_rps
    if work is not None:
        true_rps *= work.per_record_s(measured_at) / work.per_record_s(parallelism)
    hottest = 1.0 / parallelism if keyed is None else keyed.hottest_paced(vertex.name, parallelism)
    return true_rps / (vertex.input_ratio * hottest)


def divisor_at(skew: SkewModel | None, cost: StateCost | None, slots: int, measured: bool = False) -> float:
    """The hottest slot's imbalance times the work per record over its large-parallelism floor; with
    `measured`, the imbalance of the testbed's own run at `slots` (its hosts, not new ones drawn)."""
    imbalance = 1.0 if skew is None else skew.realized(slots) if measured else skew.imbalance(slots)
    return imbalance * (cost.factor(slots) if cost is not None else 1.0)


def corrected_surrogate(exploration: Exploration, divisor: Callable[[int], float]) -> Surrogate:
    """Model selection and fit again on what each measured configuration would carry balanced and at the
    large-parallelism cost per record (MST × divisor)."""
    corrected = [
        Observation(o.slots, o.memory_mb, o.mst_rps * divisor(o.slots)) for o in exploration.observations
    ]
    selection = select_model(corrected)
    return fit(min(selection, key=selection.__getitem__), corrected)


def _max_parallelism(estimates: Sequence[Estimate], unknown: int) -> int:
    """The job's max parallelism as its keyed vertices' key groups show it (`unknown` where none is
    keyed): no slot beyond it runs a subtask more. On real Flink the plan's bound is otherwise 100,000
    slots, and a target the job cannot carry was searched for through all of them (about 33 hours)."""
    groups = [v.key_groups for e in estimates for v in e.final.vertices if v.key_groups > 0]
    return min(groups, default=unknown)


def plan_from(
    exploration: Exploration,
    target_rate_rps: float,
    explorer: ExplorerSettings,
    slots_per_task_manager: int = 1,
    max_slots: int = 100_000,
    skew_quantile: float | None = QUANTILE,
    census: PhaseReading | None = None,
) -> CapacityPlan:
    """The plan from an exploration; `skew_quantile` None is StreamBed's plan as the paper makes it, else
    with our extensions: the key-group skew model (with the census, if one ran) and the state cost."""
    skew = cost = None
    if skew_quantile is not None:
        speeds = slot_speeds(exploration.estimates)
        skew = skew_model(
            exploration.estimates, skew_quantile, (census,) if census is not None else (), speeds
        )
        cost = state_cost(exploration.estimates, speeds)

    @functools.cache
    def divisor(slots: int) -> float:
        return divisor_at(skew, cost, slots)

    surrogate = (
        exploration.surrogate
        if skew is None and cost is None
        else corrected_surrogate(exploration, functools.partial(divisor_at, skew, cost, measured=True))
    )

    asked = OVERPROVISION * target_rate_rps
    max_slots = min(max_slots, _max_parallelism(exploration.estimates, max_slots))
    candidates = range(1, max_slots + 1)  # the testbed's smallest run bounds the runs, not the plan
    per_memory = {
        m: next((n for n in candidates if surrogate.predict(n, m) / divisor(n) >= asked), None)
        for m in sorted(set(explorer.memory_mb))
    }
    reachable = [(s, m) for m, s in per_memory.items() if s is not None]
    if not reachable:
        most, at_slots = max(
            (surrogate.predict(n, m) / divisor(n), n) for m in per_memory for n in candidates
        )
        skewed = skew is not None and bool(skew.loads) and skew.imbalance(at_slots) > 1.05
        bound = ", bounded by key-group skew" if skewed else ""
        raise PlanError(
            f"the {surrogate.model} surrogate never reaches {_rate(asked)} records/s (110% of the target) "
            f"within {max_slots} slots: the most it predicts is {_rate(most)} at {at_slots} slots{bound}"
        )
    slots, memory = min(reachable)
    at_memory = [e for e in exploration.estimates if e.memory_mb == memory and e.mst_rps > 0]
    largest = max(at_memory or exploration.estimates, key=lambda e: (e.slots, e.mst_rps))
    rates = vertex_rates(largest, slowest=skew_quantile is not None)
    vertices = vertex_parallelism(rates, asked, largest.slots, skew, cost, max_slots)
    coefficients = {"a_memory": surrogate.a, "b_slots": surrogate.b, "c": surrogate.c}
    return CapacityPlan(
        target_rate_rps,
        slots,
        memory,
        math.ceil(slots / slots_per_task_manager),
        slots_per_task_manager,
        vertices,
        surrogate.predict(slots, memory) / divisor(slots),
        surrogate.prediction_sd_rps(slots, memory) / divisor(slots),
        surrogate.model,
        coefficients,
        per_memory,
        exploration,
        surrogate,
        skew.imbalance(slots) if skew is not None else 1.0,
        skew,
        census if skew is not None else None,
        cost,
    )
