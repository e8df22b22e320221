"""The capacity plan: explore the testbed, invert the surrogate at 110% of the requested rate at every
memory profile, keep the fewest slots (then the least memory), and size the vertices from the per-vertex
true rates of the largest measured configuration at that memory."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from planning.bids2 import VertexRate, needed_parallelism
from planning.estimator import Estimate, EstimatorSettings, estimate_mst
from planning.explorer import Exploration, ExplorerSettings, explore
from planning.released_fit import OVERPROVISION
from planning.skew import QUANTILE, SkewModel, skew_model
from planning.surrogate import Observation, Surrogate, fit, select_model
from planning.testbed import Testbed


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
    """The model the plan inverted: the exploration's, or with skew its refit on balanced MSTs."""
    imbalance: float
    """Hottest slot's load over the mean slot's at the planned slots (1.0 without the skew model)."""

    skew: SkewModel | None = None

    def predict_rps(self, slots: int, memory_mb: float) -> float:
        """The plan's MST prediction at any configuration (surrogate over the imbalance)."""
        imbalance = self.skew.imbalance(slots) if self.skew is not None else 1.0
        return self.surrogate.predict(slots, memory_mb) / imbalance

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


def vertex_rates(estimate: Estimate) -> list[VertexRate]:
    """Non-source vertices with a busyness reading, from the estimate's last passed test."""
    final = estimate.final
    source_rps = final.achieved_rps
    return [
        VertexRate(v.name, v.true_rate_rps, v.input_rps / source_rps)
        for v in final.vertices[1:]
        if source_rps > 0 and math.isfinite(v.true_rate_rps) and v.true_rate_rps > 0
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
) -> CapacityPlan:
    """Explore the testbed and plan; `skew_quantile` None plans as StreamBed does (no key-group skew
    model), else provisions for that quantile of the imbalance (planning/skew.py)."""

    def measure(slots: int, memory_mb: float) -> Estimate:
        estimate = estimate_mst(testbed, slots, memory_mb, estimator)
        if progress is not None:
            progress(estimate)
        return estimate

    exploration = explore(measure, explorer)
    return plan_from(exploration, target_rate_rps, explorer, slots_per_task_manager, max_slots, skew_quantile)


def balanced_surrogate(exploration: Exploration, skew: SkewModel) -> Surrogate:
    """Model selection and fit again on what each measured configuration would carry balanced."""
    balanced = [
        Observation(o.slots, o.memory_mb, o.mst_rps * skew.imbalance(o.slots))
        for o in exploration.observations
    ]
    selection = select_model(balanced)
    return fit(min(selection, key=selection.__getitem__), balanced)


def plan_from(
    exploration: Exploration,
    target_rate_rps: float,
    explorer: ExplorerSettings,
    slots_per_task_manager: int = 1,
    max_slots: int = 100_000,
    skew_quantile: float | None = QUANTILE,
) -> CapacityPlan:
    skew = skew_model(exploration.estimates, skew_quantile) if skew_quantile is not None else None
    surrogate = exploration.surrogate if skew is None else balanced_surrogate(exploration, skew)

    @functools.cache
    def imbalance(slots: int) -> float:
        return skew.imbalance(slots) if skew is not None else 1.0

    asked = OVERPROVISION * target_rate_rps
    candidates = range(explorer.min_slots, max_slots + 1)
    per_memory = {
        m: next((n for n in candidates if surrogate.predict(n, m) / imbalance(n) >= asked), None)
        for m in sorted(set(explorer.memory_mb))
    }
    reachable = [(s, m) for m, s in per_memory.items() if s is not None]
    if not reachable:
        most, at_slots = max(
            (surrogate.predict(n, m) / imbalance(n), n) for m in per_memory for n in candidates
        )
        bound = ", bounded by key-group skew" if imbalance(at_slots) > 1.05 else ""
        raise PlanError(
            f"the {surrogate.model} surrogate never reaches {asked:,.0f} records/s (110% of the target) within "
            f"{max_slots} slots: the most it predicts is {most:,.0f} at {at_slots} slots{bound}"
        )
    slots, memory = min(reachable)
    at_memory = [e for e in exploration.estimates if e.memory_mb == memory and e.mst_rps > 0]
    largest = max(at_memory or exploration.estimates, key=lambda e: (e.slots, e.mst_rps))
    rates = vertex_rates(largest)
    vertices = dict(zip((v.name for v in rates), needed_parallelism(rates, asked), strict=True))
    coefficients = {"a_memory": surrogate.a, "b_slots": surrogate.b, "c": surrogate.c}
    return CapacityPlan(
        target_rate_rps,
        slots,
        memory,
        math.ceil(slots / slots_per_task_manager),
        slots_per_task_manager,
        vertices,
        surrogate.predict(slots, memory) / imbalance(slots),
        surrogate.prediction_sd_rps(slots, memory) / imbalance(slots),
        surrogate.model,
        coefficients,
        per_memory,
        exploration,
        surrogate,
        imbalance(slots),
        skew,
    )
