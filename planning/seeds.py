"""What a capacity plan's testbed runs teach the daemon's per-vertex model (capacity/dag.py), so that a
daemon started on the plan's knowledge store knows every vertex's rate at the parallelisms the testbed
ran, and through them at any other, before its first rescale.

Per run at the planned memory, per vertex: its true rate (DS2) from the line through the run's tests,
busy share against records per subtask, at busy 1, which leaves out the busy time a subtask spends
without records (a vertex far from saturated at the MST reads busy/records high by that overhead); the
ratio at the last passed test where the tests' busy shares hardly differ. Where the input is spread
evenly it is scaled to the slowest subtask's (the one that binds); a keyed vertex keeps the mean, and its
subtask shares (the key-group census's too) carry the skew. The input ratio is the last run's.

The tests' CPU readings, against the busy time they carried, seed how much CPU a busy second costs
(`core_points`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from capacity.dag import VertexSeed
from planning.estimator import Estimate
from planning.testbed import PhaseReading, VertexReading

MIN_BUSY_SPREAD = 0.1
"""Busy shares across a run's tests spread less than this: no line, the last passed test's ratio."""


def vertex_seeds(
    estimates: Sequence[Estimate], memory_mb: float, census: PhaseReading | None = None
) -> tuple[VertexSeed, ...]:
    """One seed per vertex the runs at `memory_mb` read (module docstring)."""
    runs = sorted((e for e in estimates if e.memory_mb == memory_mb and e.mst_rps > 0), key=lambda e: e.slots)
    rates: dict[str, dict[int, float]] = {}
    ratios: dict[str, float] = {}
    key_groups: dict[str, int] = {}
    shares: dict[str, dict[int, tuple[float, ...]]] = {}
    for run in runs:
        final = run.final
        readings = [t.reading for t in run.tests if len(t.reading.vertices) == len(final.vertices)]
        for position, vertex in enumerate(final.vertices):
            rate = _true_rate_rps([r.vertices[position] for r in readings], vertex)
            if math.isfinite(rate) and rate > 0:
                rates.setdefault(vertex.name, {})[vertex.parallelism] = rate
            if final.achieved_rps > 0:
                ratios[vertex.name] = vertex.input_rps / final.achieved_rps
            _keep_shares(vertex, key_groups, shares)
    for vertex in census.vertices if census is not None else ():
        _keep_shares(vertex, key_groups, shares)
    return tuple(
        VertexSeed(name, rates.get(name, {}), ratios[name], key_groups.get(name, 0), shares.get(name, {}))
        for name in ratios
    )


def core_points(estimates: Sequence[Estimate], memory_mb: float) -> tuple[tuple[float, float], ...]:
    """(busy seconds per TaskManager, mean CPU load) of every passed test at `memory_mb` that read both:
    points on the daemon's CPU-per-busy-second line (capacity/cores.py), which otherwise starts from its
    prior (a busy second costs a core's second) and over-states a vertex that waits rather than computes
    (a sink on an external store). A failed test's busy time may include waiting for the core, as the
    daemon leaves out a saturated job's; one TaskManager per slot, as the testbeds deploy."""
    points = []
    for run in estimates:
        if run.memory_mb != memory_mb:
            continue
        for test in run.tests:
            busy = test.reading.busy_per_taskmanager(run.slots)
            if test.passed and math.isfinite(busy) and math.isfinite(test.reading.cpu_load):
                points.append((busy, test.reading.cpu_load))
    return tuple(points)


def _true_rate_rps(readings: list[VertexReading], final: VertexReading) -> float:
    """Records/s a subtask processes busy all the time (module docstring)."""
    busy = np.array([r.busyness for r in readings])
    per_subtask = np.array([r.input_rps / r.parallelism for r in readings])
    usable = np.isfinite(busy) & (busy > 0)
    rate = final.true_rate_rps
    if usable.sum() >= 2 and np.ptp(busy[usable]) >= MIN_BUSY_SPREAD:
        slope, intercept = np.polyfit(busy[usable], per_subtask[usable], 1)
        if slope > 0:
            rate = float(intercept + slope)
    if final.key_groups or not math.isfinite(final.true_rate_rps) or final.true_rate_rps <= 0:
        return rate
    return rate * final.slowest_true_rate_rps / final.true_rate_rps


def _keep_shares(
    vertex: VertexReading, key_groups: dict[str, int], shares: dict[str, dict[int, tuple[float, ...]]]
) -> None:
    if vertex.key_groups and len(vertex.subtask_shares) == vertex.parallelism:
        key_groups[vertex.name] = vertex.key_groups
        shares.setdefault(vertex.name, {})[vertex.parallelism] = vertex.subtask_shares
