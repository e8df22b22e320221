"""Score the per-vertex analysis of a twin run against the twin's ground truth, loop by loop."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from messages.types import Assessment
from simulator.twin import Twin


class VertexScorer:
    """Collects, per loop, what the analysis said of each vertex and what the twin knew to be true."""

    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.names = [v.name for v in twin.topology.vertices]
        self.utilization: dict[str, list[float]] = {name: [] for name in self.names}
        self.errors: dict[str, list[float]] = {name: [] for name in self.names}
        self.needed: dict[str, int | None] = dict.fromkeys(self.names)
        self.bottlenecks: Counter[str] = Counter()
        self.true_bottlenecks: Counter[str] = Counter()
        self.models: Counter[str] = Counter()
        self.imbalance_max: dict[str, float] = {}
        self.skew_named: set[str] = set()

    def observe(self, assessment: Assessment) -> None:
        """One loop's assessment, scored against the deployment the twin runs now."""
        self.models[assessment.capacity_model] += 1
        self.true_bottlenecks[self.twin.true_bottleneck()] += 1
        if not assessment.vertices:
            return
        truth = self.twin.true_vertex_capacities_rps()
        if assessment.bottleneck_vertex:
            self.bottlenecks[assessment.bottleneck_vertex] += 1
        for vertex in assessment.vertices:
            if math.isfinite(vertex.utilization):
                self.utilization[vertex.name].append(vertex.utilization)
            true_rps = truth.get(vertex.name, math.nan)
            if math.isfinite(vertex.capacity_rps) and math.isfinite(true_rps) and true_rps > 0:
                self.errors[vertex.name].append(abs(vertex.capacity_rps - true_rps) / true_rps)
            if vertex.needed_parallelism is not None:
                known = self.needed[vertex.name]
                self.needed[vertex.name] = max(vertex.needed_parallelism, known or 0)

    def observe_skew(self, skew: dict[str, dict]) -> None:
        """One loop's key skew per keyed vertex (IterationResult.skew): δ and whether foresail named it."""
        for name, fields in skew.items():
            imbalance = fields["imbalance_busy"]
            imbalance = fields["imbalance_records"] if imbalance is None else imbalance
            if imbalance is not None:
                self.imbalance_max[name] = max(imbalance, self.imbalance_max.get(name, 0.0))
            if fields["skew_persistent"]:
                self.skew_named.add(name)

    def summary(self) -> dict[str, object]:
        loops = sum(self.models.values())
        return {
            "bottleneck_vertex": _mode(self.bottlenecks),
            "true_bottleneck_vertex": _mode(self.true_bottlenecks),
            "capacity_model_dag_share": round(self.models["dag"] / loops, 4) if loops else None,
            "capacity_model_cores_share": round(self.models["cores"] / loops, 4) if loops else None,
            "skew_imbalance_max": round(max(self.imbalance_max.values()), 4) if self.imbalance_max else None,
            "skew_named_vertices": sorted(self.skew_named),
            "vertices": [
                {
                    "name": name,
                    "needed_parallelism_at_peak": self.needed[name],
                    "median_utilization": _median(self.utilization[name], 4),
                    "capacity_error_pct": _median([e * 100 for e in self.errors[name]], 3),
                }
                for name in self.names
            ],
        }


def _mode(counts: Counter[str]) -> str | None:
    return counts.most_common(1)[0][0] if counts else None


def _median(values: list[float], digits: int) -> float | None:
    return round(float(np.median(values)), digits) if values else None
