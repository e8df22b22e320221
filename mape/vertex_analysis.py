"""Per-vertex analysis beside the job-level CPU lines, and which of the two bounds the job.

Two limits hold at once in reactive mode: no subtask can be busy more than 1,000 ms per second (a vertex's
true rate, capacity/dag.py), and a TaskManager's subtasks share its CPU (the per-worker CPU lines,
capacity/model.py). Each model over-promises where the other binds: CPU lines over-promise for a vertex
that waits rather than computes (a sink bound by an external store: busy all the time at low CPU), true
rates over-promise when several vertices' work adds up on one core (every vertex far from busy, the core
saturated). So the capacity at every scale-out is the smaller of the two, and the Assessment says which
one binds at the current scale-out and why. Without per-vertex metrics (or with `capacity.model: job`)
the job-level model stands alone, and the audit event says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from capacity.dag import DagModel, subtask_windows
from messages.types import Observation, VertexAssessment


@dataclass(frozen=True)
class VertexView:
    """The capacities to plan with and what the per-vertex analysis concluded."""

    capacities_rps: dict[int, float]
    sources: dict[int, str]
    model: str
    reason: str
    bottleneck: str | None = None
    vertices: tuple[VertexAssessment, ...] = ()


def job_level_only(capacities_rps: dict[int, float], sources: dict[int, str], reason: str) -> VertexView:
    return VertexView(dict(capacities_rps), dict(sources), "job", reason)


def analyse_vertices(
    observation: Observation,
    model: DagModel,
    job_capacities_rps: dict[int, float],
    job_sources: dict[int, str],
    current: int,
    max_scaleout: int,
    hottest_cpu: float,
) -> VertexView:
    """Learn from the window's task metrics and bound each scale-out's capacity by both models."""
    graph = observation.job_graph
    if graph is None or not observation.subtasks:
        return job_level_only(job_capacities_rps, job_sources, "no per-vertex metrics: job-level model")
    windows = subtask_windows(
        observation.subtasks,
        graph,
        observation.uptime_s,
        observation.time_s,
        model.settings.learning_warmup_s,
    )
    managed_mb = observation.managed_memory_mb
    stateful = any(o.stateful for o in observation.operators)  # memory changes no stateless vertex's rate
    known = stateful and managed_mb is not None and math.isfinite(managed_mb)
    model.use_configuration(f"{managed_mb:.0f}mb" if known else "")
    model.learn(graph, windows)
    estimate = model.estimate(graph, windows, current, max_scaleout)
    capacities, sources = dict(job_capacities_rps), dict(job_sources)
    for n, dag_rps in estimate.per_scaleout_rps.items():
        if not dag_rps <= capacities.get(n, math.inf):
            continue
        if job_sources.get(n) == "cache-curve" and n != current:
            continue  # a cache reader's unseen scale-outs follow the cache curve, not today's rates
        capacities[n] = dag_rps
        sources[n] = estimate.sources[n] if n in job_sources else "extrapolated"
    dag_now = estimate.per_scaleout_rps.get(current, math.inf)
    job_now = job_capacities_rps.get(current, math.inf)
    busiest = max(
        (v for v in estimate.vertices if math.isfinite(v.utilization)),
        key=lambda v: v.utilization,
        default=None,
    )
    if not math.isfinite(dag_now) and not math.isfinite(job_now):
        return VertexView(
            capacities, sources, "job", "per-vertex rates not learned yet", None, estimate.vertices
        )
    if dag_now <= job_now:  # a tie (a saturated job measured by both): the vertex view says more
        bottleneck = next(v for v in estimate.vertices if v.name == estimate.bottleneck)
        reason = (
            f"true rates bind: {bottleneck.name} carries {dag_now:.0f} rps at busy "
            f"{_pct(bottleneck.utilization)} while the hottest CPU is {_pct(hottest_cpu)}"
            + (
                f"; CPU lines over-promise ({job_now:.0f} rps): the vertex waits more than it computes"
                if math.isfinite(job_now)
                else ""
            )
        )
        return VertexView(capacities, sources, "dag", reason, bottleneck.name, estimate.vertices)
    reason = (
        f"CPU lines bind: {job_now:.0f} rps at CPU {_pct(hottest_cpu)}, below the true rates' "
        f"{dag_now:.0f} rps (busiest vertex "
        f"{busiest.name if busiest else '?'} at {_pct(busiest.utilization if busiest else math.nan)}): "
        "the vertices share each TaskManager's core"
    )
    return VertexView(
        capacities, sources, "job", reason, busiest.name if busiest else None, estimate.vertices
    )


def with_needed_parallelism(
    vertices: tuple[VertexAssessment, ...],
    observation: Observation,
    model: DagModel,
    source_peak_rps: float,
    max_scaleout: int,
) -> tuple[VertexAssessment, ...]:
    """Each vertex's parallelism for the forecast peak (DS2's walk from the forecast source rate)."""
    graph = observation.job_graph
    if graph is None or not math.isfinite(source_peak_rps):
        return vertices
    return tuple(
        replace(
            v, needed_parallelism=model.needed_parallelism(graph, v.vertex_id, source_peak_rps, max_scaleout)
        )
        for v in vertices
    )


def _pct(share: float) -> str:
    return f"{share:.0%}" if math.isfinite(share) else "unknown"
