"""BIDS2 (StreamBed's Configuration Optimizer): the per-vertex parallelism that maximizes the source rate
for a slot budget, from one single-task run's per-task true rates and input ratios.

With parallelism p_i a vertex carries a source rate of p_i · r_i / alpha_i (r_i its task's true rate,
alpha_i its input per source record), so the job carries min_i of that. Raising the binding vertex one
slot at a time until the budget is spent maximizes that minimum (each vertex's term grows with its own
parallelism only), which is the MILP's optimum: λ* = max{λ : Σ max(1, ⌈λ·alpha_i / r_i⌉) ≤ B}. The
returned parallelism is the least that carries λ*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_TOLERANCE = 1e-9  # relative: λ*·alpha/r lands on an integer up to rounding


@dataclass(frozen=True)
class VertexRate:
    """One non-source vertex of a single-task run: its task's true rate (records/s it would process busy
    all the time) and the records it receives per source record."""

    name: str
    true_rate_rps: float
    input_ratio: float


@dataclass(frozen=True)
class Bids2Result:
    source_rate_rps: float
    """λ*: the source rate the budget carries at best."""
    parallelism: tuple[int, ...]
    """Per vertex, in the order given: the least parallelism that carries λ*."""
    binding: str
    """The vertex that limits λ*."""

    @property
    def slots(self) -> int:
        return sum(self.parallelism)


def bids2(vertices: tuple[VertexRate, ...] | list[VertexRate], slots: int) -> Bids2Result:
    """The best source rate for `slots` non-source slots (one task per slot) and its parallelism."""
    if not vertices:
        raise ValueError("BIDS2 needs at least one non-source vertex")
    for v in vertices:
        if not (math.isfinite(v.true_rate_rps) and v.true_rate_rps > 0):
            raise ValueError(f"vertex {v.name!r}: true rate must be a finite rate > 0, got {v.true_rate_rps}")
        if not (math.isfinite(v.input_ratio) and v.input_ratio >= 0):
            raise ValueError(f"vertex {v.name!r}: input ratio must be finite and >= 0, got {v.input_ratio}")
    if slots < len(vertices):
        raise ValueError(f"a budget of {slots} slots cannot give each of {len(vertices)} vertices one")
    with np.errstate(divide="ignore"):
        per_task = np.array(
            [v.true_rate_rps / v.input_ratio if v.input_ratio > 0 else math.inf for v in vertices]
        )
    parallelism = np.ones(len(vertices), dtype=np.int64)
    for _ in range(slots - len(vertices)):
        binding = int(np.argmin(parallelism * per_task))
        if not math.isfinite(per_task[binding]):
            break  # no vertex receives anything: more slots change nothing
        parallelism[binding] += 1
    carried = parallelism * per_task
    binding = int(np.argmin(carried))
    rate = float(carried[binding])
    least = tuple(
        1 if not math.isfinite(p) else max(1, math.ceil(rate / p * (1 - _TOLERANCE))) for p in per_task
    )
    return Bids2Result(rate, least, vertices[binding].name)


def needed_parallelism(
    vertices: tuple[VertexRate, ...] | list[VertexRate], rate_rps: float
) -> tuple[int, ...]:
    """Per vertex, the least parallelism that carries a source rate (DS2's form of the same model)."""
    return tuple(
        max(1, math.ceil(rate_rps * v.input_ratio / v.true_rate_rps * (1 - _TOLERANCE))) for v in vertices
    )
