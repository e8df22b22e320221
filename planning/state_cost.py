"""Per-record work that shrinks as the parallelism splits the state (our extension of StreamBed, not the
paper's).

A session window merges and scans the sessions its subtask holds, so a record costs more the more keys
the subtask holds, and that falls as 1/n. StreamBed's surrogates (linear, log1p, sqrt in the slots) are
concave and under-promise such a job at 40+ slots from runs of 1..8 (by 30% on the `session` topology).
The runs show it per vertex: busy slot-seconds per source record (busy share × parallelism / source
rate) fit `fixed + split / n` with split ≥ 0 per vertex (a cost that rises with n, e.g. per-subtask
overhead, is not this effect and leaves split at 0). The planner fits its surrogate to what each run
would carry at the large-parallelism cost (MST × factor) and divides the prediction by the factor at the
planned n; where no vertex's work splits, the factor is 1 and the plan is unchanged.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear

from planning.estimator import Estimate
from planning.speeds import SlotSpeeds

MIN_SHARE = 0.02
"""A split part below this share of the job's per-record work at one slot is noise, not state."""


@dataclass(frozen=True)
class VertexCost:
    """Busy slot-seconds per source record of one vertex at parallelism n: fixed_s + split_s / n."""

    name: str
    fixed_s: float
    split_s: float

    def per_record_s(self, parallelism: float) -> float:
        return self.fixed_s + self.split_s / parallelism


@dataclass(frozen=True)
class StateCost:
    vertices: tuple[VertexCost, ...]

    def per_record_s(self, parallelism: float) -> float:
        return sum(v.per_record_s(parallelism) for v in self.vertices)

    def vertex(self, name: str) -> VertexCost | None:
        return next((v for v in self.vertices if v.name == name), None)

    def factor(self, parallelism: int) -> float:
        """The job's work per record at `parallelism` over its work at infinitely many (≥ 1)."""
        return self.per_record_s(parallelism) / self.per_record_s(math.inf)


def state_cost(estimates: Sequence[Estimate], speeds: SlotSpeeds | None = None) -> StateCost | None:
    """Per vertex from the estimates' last passed tests, at a mean host's pace where `speeds` tell the
    hosts apart; None when no vertex's work splits (or the runs cover fewer than two parallelisms)."""
    readings: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for estimate in estimates:
        if estimate.mst_rps <= 0:
            continue
        for name, busy_s in estimate.final.busy_s_per_record(speeds.speeds if speeds else ()).items():
            readings[name].append((estimate.slots, busy_s))
    vertices = tuple(_fit(name, points) for name, points in readings.items())
    if not vertices:
        return None
    cost = StateCost(vertices)
    if sum(v.split_s for v in vertices) <= MIN_SHARE * cost.per_record_s(1):
        return None
    return cost


def _fit(name: str, points: list[tuple[int, float]]) -> VertexCost:
    parallelism = np.array([p for p, _ in points], dtype=float)
    cost_s = np.array([c for _, c in points])
    if len(np.unique(parallelism)) < 2:
        return VertexCost(name, float(cost_s.mean()), 0.0)
    x = np.column_stack([np.ones_like(parallelism), 1.0 / parallelism])
    fixed, split = lsq_linear(x, cost_s, bounds=([-np.inf, 0.0], np.inf), method="bvls").x
    if fixed <= 0:  # all of it splits: a cost that vanishes at large n is not one to extrapolate
        return VertexCost(name, float(cost_s.mean()), 0.0)
    return VertexCost(name, float(fixed), float(split))
