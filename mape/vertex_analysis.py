"""Per-vertex analysis beside the job-level CPU lines, and which limit binds the job.

Two limits hold at once in reactive mode: no subtask can be busy more than 1,000 ms per second (a vertex's
true rate, capacity/dag.py), and a TaskManager's subtasks share its core (capacity/cores.py: the busy time
the subtasks add up on it, at the CPU a busy second costs). Each over-promises where the other binds: true
rates over-promise when several vertices' work adds up on one core (every vertex far from busy, the core
saturated), the core over-promises for a vertex that waits rather than computes (a sink bound by an
external store: busy all the time at low CPU). So the capacity at every scale-out is the smaller of the
two, and the Assessment says which binds at the current scale-out and why. The per-worker CPU lines
(capacity/model.py) stand in for the cores until the rates of every vertex that reports busy time are
known; without per-vertex metrics (or with `capacity.model: job`) they stand alone, and the audit event
says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from capacity.cores import CoreLimit, CoreModel, contended_taskmanagers, taskmanager_busy
from capacity.dag import DagModel
from capacity.subtask_windows import subtask_windows
from messages.types import Observation, VertexAssessment

_SHARED_CORE = "the vertices share each TaskManager's core"


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
    cores: CoreModel,
    job_capacities_rps: dict[int, float],
    job_sources: dict[int, str],
    current: int,
    max_scaleout: int,
    worker_cpu: dict[str, float],
    saturated: bool,
    loop_interval_s: float = 60.0,
    learn: bool = True,
) -> VertexView:
    """Learn from the window's task metrics and CPU, and bound each scale-out's capacity by both limits
    (`worker_cpu`: each TaskManager's mean CPU this window; a `saturated` job teaches the cores nothing:
    its busy time may include waiting for the core; `loop_interval_s`: the time this learning stands for,
    whatever the metrics window's length; without `learn` the window only reads what is known)."""
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
    busy = taskmanager_busy(windows)
    keyed = frozenset(v.vertex_id for v in graph.vertices if graph.keyed(v.vertex_id))
    if learn:
        model.learn(graph, windows, contended_taskmanagers(windows, worker_cpu, cores, busy, keyed))
    estimate = model.estimate(graph, windows, current, max_scaleout)
    if learn and not saturated:
        cores.learn(busy, worker_cpu, loop_interval_s)
    reactive = all(v.parallelism == current for v in graph.vertices if v.max_parallelism >= current)
    # A saturated job's throughput is its capacity, measured (the job-level model takes it), and on a real
    # host its busy time then includes waiting for the core; per-vertex parallelism (issue 13's path)
    # sizes its slots' cores itself (mape/vertex_knowledge.py).
    use_cores = reactive and not saturated
    core = cores.limit(model, graph, windows, busy, current, max_scaleout) if use_cores else CoreLimit({})
    capacities, sources = dict(job_capacities_rps), dict(job_sources)
    for n in range(1, max_scaleout + 1):
        vertex_rps = estimate.per_scaleout_rps.get(n, math.inf)
        job_rps = job_capacities_rps.get(n, math.inf)
        bound = min(vertex_rps, core.per_scaleout_rps.get(n, job_rps))  # the cores stand in for the lines
        if not math.isfinite(bound) or bound == job_rps:
            continue
        if job_sources.get(n) == "cache-curve" and n != current:
            continue  # a cache reader's unseen scale-outs follow the cache curve, not today's rates
        capacities[n] = bound
        sources[n] = estimate.sources.get(n, "extrapolated") if n in job_sources else "extrapolated"
    dag_now = estimate.per_scaleout_rps.get(current, math.inf)
    job_now = job_capacities_rps.get(current, math.inf)
    core_now = core.per_scaleout_rps.get(current, math.nan)
    busiest = max(
        (v for v in estimate.vertices if math.isfinite(v.utilization)),
        key=lambda v: v.utilization,
        default=None,
    )
    busiest_name = busiest.name if busiest else None
    busiest_text = (
        f"busiest vertex {busiest_name} at {_pct(busiest.utilization)}" if busiest else "no busy time"
    )
    hottest_cpu = _pct(max(worker_cpu.values(), default=math.nan))
    if math.isfinite(core_now) and core_now < dag_now:
        reason = (
            f"cores bind: TaskManager {core.taskmanager}'s subtasks are busy {core.busy:.2f} s per second; "
            f"at {core.cpu_per_busy:.2f} CPU per busy second over an idle {core.idle_cpu:.2f} its core "
            f"saturates at {core_now:.0f} rps, below the true rates' {dag_now:.0f} rps ({busiest_text}): "
            f"{_SHARED_CORE}"
        )
        return VertexView(capacities, sources, "cores", reason, busiest_name, estimate.vertices)
    if not math.isfinite(dag_now) and not math.isfinite(job_now):
        return VertexView(
            capacities, sources, "job", "per-vertex rates not learned yet", None, estimate.vertices
        )
    # a tie (a saturated job measured by both models): the vertex view says more
    if dag_now <= job_now or math.isfinite(core_now):
        bottleneck = next(v for v in estimate.vertices if v.vertex_id == estimate.bottleneck_id)
        reason = (
            f"true rates bind: {bottleneck.name} carries {dag_now:.0f} rps at busy "
            f"{_pct(bottleneck.utilization)} while the hottest CPU is {hottest_cpu}"
        )
        beyond = [
            f"{name} would carry {rps:.0f} rps"
            for name, rps in (("the cores", core_now), ("the CPU lines", job_now))
            if math.isfinite(rps) and rps > dag_now
        ]
        if beyond:
            reason += f"; {' and '.join(beyond)}: the vertex waits more than it computes"
        return VertexView(capacities, sources, "dag", reason, bottleneck.name, estimate.vertices)
    reason = (
        f"CPU lines bind: {job_now:.0f} rps at CPU {hottest_cpu}, below the true rates' {dag_now:.0f} rps "
        f"({busiest_text}; the cores' CPU per busy second is not known yet): {_SHARED_CORE}"
    )
    return VertexView(capacities, sources, "job", reason, busiest_name, estimate.vertices)


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
