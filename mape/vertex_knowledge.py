"""What the per-vertex plan learns beside the core: the per-vertex path's own downtime, the job graph as last
seen, and how much of a subtask's busy time is CPU.

The downtime of a per-vertex rescale (the adaptive scheduler's REST PUT, then the job restarts from the
next completed checkpoint) is ~3 s on Flink 2.3 against ~35 s for adding a reactive-mode TaskManager
(docs: per-vertex.md), so it gets its own `DowntimeModel`, prior `recovery.vertex_downtime_s`, learned only
from the `CompletedRescale`s of granularity "vertex" that the execute side measures (request → every vertex
running at its target); the reactive-mode downtimes are never used for it.

Slot sharing puts subtask i of every vertex into slot i, so the subtasks in one slot share its core. Busy
time is not CPU time everywhere (a sink waiting on a store is busy at low CPU), and on a saturated core
every subtask waits for the CPU with records queued, which Flink counts as busy, so the rates learned
there are the slot's, not the vertex's. The plan therefore calibrates its slot model each loop: per
TaskManager, (CPU − idle) / (saturation − idle) over the busy time the learned rates predict for the
records its subtasks processed (Σ records in / rate), the median over TaskManagers. Where the slots hold
different mixes (per-vertex parallelism), the CPU of each TaskManager also tells each vertex's own CPU per
busy second: TaskManager CPU share ≈ Σ_v c_v · predicted busy_v, fitted over the TaskManagers by
non-negative least squares with every c_v pulled towards that median (the slots of a job in reactive mode
all hold the same mix: there the median alone is known). A sink that waits on its store then costs its
slot little CPU, and the vertices that compute cost theirs in full. Rates read on a saturated slot are the
slot's, lower than the vertex's own: capacity/dag.py does not learn those far under the rate known.

An analysis extension (mape/extensions.py); its state is saved in the knowledge under "vertex".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from capacity.cores import NEAR_SATURATION
from capacity.subtask_windows import current_subtasks, input_rps, plausible_rps
from mape.extensions import ObservingExtension
from mape.knowledge import Knowledge
from messages.types import Assessment, JobEdge, JobGraph, JobVertex, Observation
from recovery.downtime import DowntimeModel

VERTEX = "vertex"
CPU_PER_BUSY_SMOOTHING = 0.7
"""Weight of a new window's CPU per predicted busy second (high: it must stay in step with the rates)."""
VERTEX_CPU_PRIOR_WEIGHT = 0.3
"""Weight of the pull of each vertex's CPU per busy second towards the median, against one TaskManager."""
MIN_BUSY_FOR_CPU = 0.2
"""A TaskManager whose subtasks are busy less than this (summed) tells too little about the CPU share."""


@dataclass(frozen=True)
class VertexWindow:
    """One vertex over the last loop window, summed over its subtasks (the per-vertex baselines' input)."""

    parallelism: int
    records_in_rps: float
    records_out_rps: float
    busy_mean: float
    """Mean busy share over subtasks and samples (NaN: Flink reports none)."""
    busy_max: float
    """Busy share of the busiest subtask (the Flink operator's MAX aggregator)."""


@dataclass
class VertexKnowledge:
    """The per-vertex path's downtime, the job graph last seen, and the CPU share of busy time."""

    downtime: DowntimeModel
    graph: JobGraph | None = None
    cpu_per_busy: float = math.nan
    """CPU (cores) per second of busy time the learned rates predict, smoothed; NaN until learned (the plan
    then assumes 1)."""
    cpu_per_busy_by_vertex: dict[str, float] = field(default_factory=dict)
    """Vertex id → its own CPU per busy second, smoothed (missing: `cpu_per_busy`)."""
    rescales_learned: int = 0
    new_records: list = field(default_factory=list)
    window: dict[str, VertexWindow] = field(default_factory=dict)
    """Vertex id → the last window's task metrics (not persisted: one window old at most)."""

    @classmethod
    def fresh(cls, prior_s: float, window: int = 20) -> VertexKnowledge:
        return cls(DowntimeModel(prior_s, prior_s, window))

    def learn_rescale(self, downtime_s: float, grew: bool) -> None:
        if not math.isfinite(downtime_s):
            return  # not measured (see VertexRescaler.finished)
        self.downtime.observe("out" if grew else "in", downtime_s)
        self.rescales_learned += 1

    def learn_cpu_share(self, share: float) -> None:
        if not math.isfinite(share):
            return
        share = _plausible_share(share)
        if math.isnan(self.cpu_per_busy):
            self.cpu_per_busy = share
        else:
            self.cpu_per_busy += CPU_PER_BUSY_SMOOTHING * (share - self.cpu_per_busy)

    def seed_cpu_share(
        self, points: Sequence[tuple[float, float]], idle_cpu: float, saturation_cpu: float
    ) -> bool:
        """Start the CPU per busy second from a capacity plan's testbed: (busy seconds per TaskManager, its
        mean CPU) of tests its cores were not saturated in, the median of the TaskManagers' shares as each
        loop takes it (its slots all held the same mix, so no vertex's own share is known). Knowledge
        learned already stays. Returns whether it seeded."""
        if math.isfinite(self.cpu_per_busy) or saturation_cpu <= idle_cpu:
            return False
        in_span = [(busy, _cpu_in_span(busy, cpu, idle_cpu, saturation_cpu)) for busy, cpu in points]
        shares = [share / busy for busy, share in in_span if math.isfinite(share)]
        if not shares:
            return False
        self.cpu_per_busy = _plausible_share(float(np.median(shares)))
        return True

    def forget_seeded(self) -> None:
        """A capacity plan's CPU per busy second turned out to be another job's (`Knowledge.check_seeded_job`):
        before any graph was seen, nothing here was learned, so it was all seeded."""
        if self.graph is None:
            self.cpu_per_busy = math.nan

    def learn_vertex_cpu(self, shares: dict[str, float]) -> None:
        for vertex_id, share in shares.items():
            share = _plausible_share(share)
            known = self.cpu_per_busy_by_vertex.get(vertex_id, share)
            self.cpu_per_busy_by_vertex[vertex_id] = known + CPU_PER_BUSY_SMOOTHING * (share - known)

    def vertex_cpu_per_busy(self) -> dict[str, float]:
        """Vertex id → CPU per busy second: its own where learned, else the median's."""
        if self.graph is None:
            return {}
        common = self.cpu_per_busy if math.isfinite(self.cpu_per_busy) and self.cpu_per_busy > 0 else 1.0
        return {
            v.vertex_id: self.cpu_per_busy_by_vertex.get(v.vertex_id, common) for v in self.graph.vertices
        }

    def to_dict(self) -> dict:
        return {
            "downtime": self.downtime.to_dict(),
            "graph": None if self.graph is None else _graph_dict(self.graph),
            "cpu_per_busy": None if math.isnan(self.cpu_per_busy) else self.cpu_per_busy,
            "rescales_learned": self.rescales_learned,
            "cpu_per_busy_by_vertex": dict(self.cpu_per_busy_by_vertex),
        }

    @classmethod
    def from_dict(cls, data: dict, prior_s: float = 3.0, window: int = 20) -> VertexKnowledge:
        if not data:
            return cls.fresh(prior_s, window)
        graph = data.get("graph")
        cpu = data.get("cpu_per_busy")
        return cls(
            DowntimeModel.from_dict(data["downtime"], DowntimeModel(prior_s, prior_s, window)),
            None if graph is None else _graph_of(graph),
            math.nan if cpu is None else _stored_share(cpu),
            {str(k): _stored_share(v) for k, v in (data.get("cpu_per_busy_by_vertex") or {}).items()},
            int(data.get("rescales_learned", 0)),
        )


def vertex_knowledge(knowledge: Knowledge) -> VertexKnowledge | None:
    state = knowledge.extensions.get(VERTEX)
    return state if isinstance(state, VertexKnowledge) else None


class VertexWatch(ObservingExtension):
    """Learns the per-vertex path's downtime from measured rescales, keeps the graph, learns the CPU share."""

    def __init__(self, idle_cpu: float, saturation_cpu: float) -> None:
        self.idle_cpu = idle_cpu
        self.saturation_cpu = saturation_cpu

    def refine(self, observation: Observation, knowledge: Knowledge, assessment: Assessment) -> Assessment:
        state = vertex_knowledge(knowledge)
        if state is None:
            return assessment
        before = {} if state.graph is None else {v.vertex_id: v.parallelism for v in state.graph.vertices}
        for rescale in observation.completed_rescales:
            if rescale.granularity == "vertex":
                grew = any(p > before.get(v, 0) for v, p in rescale.vertex_parallelism.items())
                state.learn_rescale(rescale.downtime_s, grew)
        if observation.job_graph is not None:
            state.graph = observation.job_graph
            state.window = vertex_windows(observation)
        if not assessment.problems and not assessment.warming_up:
            busy, cpu = self._predicted_busy(observation, knowledge)
            state.learn_cpu_share(_median_share(busy, cpu))
            if math.isfinite(state.cpu_per_busy):
                state.learn_vertex_cpu(_vertex_shares(busy, cpu, state.cpu_per_busy))
        return assessment

    def _predicted_busy(
        self, observation: Observation, knowledge: Knowledge
    ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        """Per TaskManager with enough load and a core not near saturation: the busy share the learned rates
        predict for the records each vertex's subtask there processed, and its CPU as a share of the span
        idle → saturation. A saturated core's CPU stops at saturation while its subtasks' records keep
        their cost: fitted, it makes the vertices it hosts look cheaper (hot-key × sine on the twin: the hot
        count's 0.76 CPU per busy second, where it costs 1, promised a configuration 13% more than it
        carries)."""
        graph = observation.job_graph
        if graph is None or self.saturation_cpu <= self.idle_cpu:
            return {}, {}
        parallelism = {v.vertex_id: v.parallelism for v in graph.vertices}
        sources = {v.vertex_id for v in graph.sources}
        busy: dict[str, dict[str, float]] = {}
        for series in current_subtasks(observation.subtasks, graph):
            records = plausible_rps(input_rps(series, series.vertex_id in sources))
            records = records[np.isfinite(records)]
            p = parallelism.get(series.vertex_id, 0)
            rate = knowledge.dag.subtask_rate_rps(series.vertex_id, p, series.subtask_index)
            if series.taskmanager_id is not None and len(records) and math.isfinite(rate) and rate > 0:
                mine = busy.setdefault(series.taskmanager_id, {})
                mine[series.vertex_id] = mine.get(series.vertex_id, 0.0) + float(records.mean()) / rate
        cpu = {}
        for worker in observation.workers:
            readings = worker.cpu[np.isfinite(worker.cpu)]
            used = float(readings.mean()) if len(readings) else math.nan
            busy_total = sum(busy.get(worker.worker_id, {}).values())
            share = _cpu_in_span(busy_total, used, self.idle_cpu, self.saturation_cpu)
            if math.isfinite(share):
                cpu[worker.worker_id] = share
        return {tm: busy[tm] for tm in cpu}, cpu


def _cpu_in_span(busy: float, used: float, idle_cpu: float, saturation_cpu: float) -> float:
    """A TaskManager's CPU as a share of the span idle → saturation where it tells what a busy second costs:
    its subtasks busy enough, its core not near saturation (a saturated core's CPU stops while its
    records keep their cost); NaN elsewhere."""
    if busy < MIN_BUSY_FOR_CPU or not used < NEAR_SATURATION * saturation_cpu:
        return math.nan
    return (used - idle_cpu) / (saturation_cpu - idle_cpu)


def _plausible_share(share: float) -> float:
    """A CPU per busy second within what one busy thread can cost (a waiting sink: little; one core: 1)."""
    return min(max(share, 0.02), 2.0)


def _stored_share(value: object) -> float:
    """A stored CPU per busy second, held to what one could be learned as (10^6 took every vertex to its
    maximum; a NaN stayed NaN, smoothing kept it): ValueError for one that is no number."""
    share = float(value)  # type: ignore[arg-type]
    if not math.isfinite(share):
        raise ValueError(f"a CPU per busy second of {share}")
    return _plausible_share(share)


def _median_share(busy: dict[str, dict[str, float]], cpu: dict[str, float]) -> float:
    """Median over TaskManagers of the CPU used per predicted busy second (NaN: none with enough load)."""
    shares = [cpu[tm] / sum(busy[tm].values()) for tm in cpu]
    return float(np.median(shares)) if shares else math.nan


def _vertex_shares(
    busy: dict[str, dict[str, float]], cpu: dict[str, float], common: float
) -> dict[str, float]:
    """Each vertex's CPU per busy second: CPU_i ≈ Σ_v c_v · busy_v,i over the TaskManagers, non-negative,
    every c_v pulled towards `common` (where all slots hold one mix, the pull alone splits it)."""
    vertices = sorted({v for mine in busy.values() for v in mine})
    if not vertices or not cpu:
        return {}
    rows = [[busy[tm].get(v, 0.0) for v in vertices] for tm in cpu]
    weight = VERTEX_CPU_PRIOR_WEIGHT
    matrix = np.vstack([np.array(rows), weight * np.eye(len(vertices))])
    target = np.concatenate([np.array(list(cpu.values())), np.full(len(vertices), weight * common)])
    shares, _ = nnls(matrix, target)
    return dict(zip(vertices, shares.tolist(), strict=True))


def vertex_windows(observation: Observation) -> dict[str, VertexWindow]:
    """Per vertex, its subtasks' records and busy time over the window, of the subtasks that exist now."""
    graph = observation.job_graph
    sources = {v.vertex_id for v in graph.sources}
    grouped: dict[str, list] = {}
    for series in current_subtasks(observation.subtasks, graph):
        grouped.setdefault(series.vertex_id, []).append(series)
    windows = {}
    for vertex in graph.vertices:
        subtasks = grouped.get(vertex.vertex_id, [])
        records_in = [_mean(plausible_rps(input_rps(s, vertex.vertex_id in sources))) for s in subtasks]
        records_out = [_mean(plausible_rps(s.records_out_rps)) for s in subtasks]
        busy = [_mean(s.busy_ms_per_s) / 1000.0 for s in subtasks]
        known = [b for b in busy if math.isfinite(b)]
        windows[vertex.vertex_id] = VertexWindow(
            vertex.parallelism,
            float(np.nansum(records_in)) if any(map(math.isfinite, records_in)) else math.nan,
            float(np.nansum(records_out)) if any(map(math.isfinite, records_out)) else math.nan,
            float(np.mean(known)) if known else math.nan,
            max(known) if known else math.nan,
        )
    return windows


def _mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else math.nan


def _graph_dict(graph: JobGraph) -> dict:
    return {
        "vertices": [[v.vertex_id, v.name, v.parallelism, v.max_parallelism] for v in graph.vertices],
        "edges": [[e.source_id, e.target_id, e.ship_strategy] for e in graph.edges],
    }


def _graph_of(data: dict) -> JobGraph:
    return JobGraph(
        tuple(JobVertex(str(i), str(n), int(p), int(m)) for i, n, p, m in data["vertices"]),
        tuple(JobEdge(str(s), str(t), str(k)) for s, t, k in data["edges"]),
    )
