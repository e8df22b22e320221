"""The messages that flow one way through the loop: Observation → Assessment → Decision.

Times are UTC seconds as floats (virtual seconds in the twin); names carry their units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np

MAX_RATE_RPS = 1e9
"""Highest record rate any series may show (no Flink job reads a billion records a second): above it a
reading is damage, never load."""


def finite_number(value: object) -> bool:
    """A finite int or float, not a bool: what a stored number must be before it is trusted."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def frozen_array(values: object) -> np.ndarray:
    """A read-only float array, so a message cannot be changed by the phase that receives it."""
    array = np.array(values, dtype=float)
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class WorkerSeries:
    """One worker's samples over the loop window, as the metrics backend reports them.

    `cpu` is the worker's CPU load (0..1) and `throughput_rps` the records/s its source consumes,
    both averaged over the backend's smoothing window and sampled at the scrape step. NaN marks a
    gap (the worker was restarting or the sample was missing).
    """

    worker_id: str
    timestamps_s: np.ndarray
    cpu: np.ndarray
    throughput_rps: np.ndarray
    busy_ratio: np.ndarray | None = None
    """Share of each second the worker spent processing (Flink's busyTimeMsPerSecond / 1000); None when the
    backend does not report it. DS2 and the Flink operator derive true processing rates from it."""

    def __post_init__(self) -> None:
        names = ("timestamps_s", "cpu", "throughput_rps") + (
            () if self.busy_ratio is None else ("busy_ratio",)
        )
        for name in names:
            object.__setattr__(self, name, frozen_array(getattr(self, name)))
        if len({len(getattr(self, name)) for name in names}) > 1:
            raise ValueError(f"worker {self.worker_id}: series of different lengths")


@dataclass(frozen=True)
class OperatorState:
    """One operator's state signals over the loop window (Justin's per-operator view).

    An operator is stateful when its keyed-state backend reports metrics (RocksDB tickers or state-latency
    histograms); a stateless one reports none. NaN marks a signal the backend could not provide, and a
    hit rate is NaN when the window saw no state reads at all (nothing to measure the cache on).
    """

    name: str
    stateful: bool
    cache_hit_rate: float = math.nan
    """hits / (hits + misses) of the block cache over the window, from rates of the cumulative tickers;
    1.0 when there were reads and none missed."""
    state_reads_rps: float = math.nan
    """Block-cache lookups per second over the window (hits + misses)."""
    state_latency_ns: float = math.nan
    """Typical state-access latency from the latency-tracking histograms, nanoseconds."""
    managed_memory_used_mb: float = math.nan
    """Managed memory the operator's state backend holds (block cache usage), summed over subtasks."""


@dataclass(frozen=True)
class JobVertex:
    """One vertex (task) of the job graph as Flink's REST API names it (`/jobs/:jobid`)."""

    vertex_id: str
    name: str
    parallelism: int
    max_parallelism: int


@dataclass(frozen=True)
class JobEdge:
    """A data exchange between two vertices, with Flink's ship strategy (`/jobs/:jobid/plan`)."""

    source_id: str
    target_id: str
    ship_strategy: str = "FORWARD"
    """HASH (a keyBy: key groups decide the receiving subtask), REBALANCE, FORWARD, RESCALE, BROADCAST, ..."""

    @property
    def keyed(self) -> bool:
        return self.ship_strategy.upper() == "HASH"


@dataclass(frozen=True)
class JobGraph:
    """The job's vertices in topological order and the edges between them."""

    vertices: tuple[JobVertex, ...]
    edges: tuple[JobEdge, ...] = ()

    def __post_init__(self) -> None:
        position = {v.vertex_id: i for i, v in enumerate(self.vertices)}
        if len(position) != len(self.vertices):
            raise ValueError("job graph: duplicate vertex ids")
        for edge in self.edges:
            if edge.source_id not in position or edge.target_id not in position:
                raise ValueError(
                    f"job graph: edge {edge.source_id} -> {edge.target_id} names an unknown vertex"
                )
            if position[edge.source_id] >= position[edge.target_id]:
                raise ValueError("job graph: vertices are not in topological order")

    @cached_property
    def _by_id(self) -> dict[str, JobVertex]:
        return {v.vertex_id: v for v in self.vertices}

    @cached_property
    def _inputs(self) -> dict[str, tuple[JobEdge, ...]]:
        """Edges into each vertex, indexed once: the analysis asks for every vertex's at every walk."""
        return {
            v.vertex_id: tuple(e for e in self.edges if e.target_id == v.vertex_id) for v in self.vertices
        }

    @cached_property
    def _outputs(self) -> dict[str, tuple[JobEdge, ...]]:
        return {
            v.vertex_id: tuple(e for e in self.edges if e.source_id == v.vertex_id) for v in self.vertices
        }

    def vertex(self, vertex_id: str) -> JobVertex:
        return self._by_id[vertex_id]

    def inputs(self, vertex_id: str) -> tuple[JobEdge, ...]:
        return self._inputs.get(vertex_id, ())

    def outputs(self, vertex_id: str) -> tuple[JobEdge, ...]:
        return self._outputs.get(vertex_id, ())

    @property
    def sources(self) -> tuple[JobVertex, ...]:
        """Vertices without inputs: where the job's records enter."""
        targets = {e.target_id for e in self.edges}
        return tuple(v for v in self.vertices if v.vertex_id not in targets)

    def keyed(self, vertex_id: str) -> bool:
        """Whether the vertex reads a keyed (HASH) input, so key groups decide each subtask's share."""
        return any(e.keyed for e in self.inputs(vertex_id))


@dataclass(frozen=True)
class SubtaskSeries:
    """One subtask of one vertex over the loop window: Flink's task metrics, sampled like `WorkerSeries`.

    Per second of the subtask's time, busy + backpressured + idle = 1,000 ms. `busy_ms_per_s` is NaN for a
    legacy source (Flink reports no busy time for it) and NaN marks a gap.
    """

    vertex_id: str
    subtask_index: int
    taskmanager_id: str | None
    timestamps_s: np.ndarray
    records_in_rps: np.ndarray
    records_out_rps: np.ndarray
    busy_ms_per_s: np.ndarray
    backpressured_ms_per_s: np.ndarray
    idle_ms_per_s: np.ndarray

    def __post_init__(self) -> None:
        names = (
            "timestamps_s",
            "records_in_rps",
            "records_out_rps",
            "busy_ms_per_s",
            "backpressured_ms_per_s",
            "idle_ms_per_s",
        )
        for name in names:
            object.__setattr__(self, name, frozen_array(getattr(self, name)))
        if len({len(getattr(self, name)) for name in names}) > 1:
            raise ValueError(f"subtask {self.vertex_id}[{self.subtask_index}]: series of different lengths")


@dataclass(frozen=True)
class FailedMemoryChange:
    """A memory change (memory levels) whose job was not running with the new managed memory within the
    rescale timeout: on Kubernetes, pods that cannot be scheduled with it."""

    requested_s: float
    managed_mb: float


@dataclass(frozen=True)
class CompletedRescale:
    """A rescale from its request to the job running at the new configuration (the measured downtime)."""

    requested_s: float
    finished_s: float
    granularity: Literal["job", "vertex"]
    vertex_parallelism: dict[str, int] = field(default_factory=dict)
    """Vertex id → parallelism reached (per-vertex rescales; empty for a job-level one)."""

    @property
    def downtime_s(self) -> float:
        return self.finished_s - self.requested_s


@dataclass(frozen=True)
class Observation:
    """Immutable snapshot of one loop window, from a `MetricsSource`.

    Anything the backend could not provide is None (or NaN inside series) and named in `problems`;
    the loop holds rather than decide on such data.
    """

    time_s: float
    window_s: float
    input_timestamps_s: np.ndarray
    input_rate_rps: np.ndarray
    workers: tuple[WorkerSeries, ...]
    backlog_records: float | None
    parallelism: int | None
    uptime_s: float | None
    restarts: int | None = None
    problems: tuple[str, ...] = ()
    operators: tuple[OperatorState, ...] = ()
    """Per-operator state signals; empty when the backend does not report operators (memory unknown)."""
    managed_memory_mb: float | None = None
    """Managed memory per task slot the job runs with now (0 = none); None when unknown."""
    job_graph: JobGraph | None = None
    """The job's vertices and edges; None when the backend does not know the graph (job-level model only)."""
    subtasks: tuple[SubtaskSeries, ...] = ()
    """Per vertex and subtask, the task metrics of the window (only subtasks that exist now); empty when the
    backend reports none, and the analysis then falls back to the job-level model."""
    latency_ms: np.ndarray | None = None
    """Mean end-to-end latency the job shows at each input-rate timestamp (Flink's latency markers or the
    source's event-time lag), NaN where unknown; None when the backend reports no latency."""
    completed_rescales: tuple[CompletedRescale, ...] = ()
    """Rescales the execute side saw finish since the previous observation, with their measured downtime
    (the per-vertex path measures it exactly: request → every vertex running at its target)."""
    withdrawn_rescales_s: tuple[float, ...] = ()
    """Request times of rescales the loop executed that never reached Flink (a deferred per-vertex PUT that
    Flink refused, or one dropped while foresail was paused): nothing restarted, so neither the
    stabilization nor the rescale budget may count them."""
    failed_memory_changes: tuple[FailedMemoryChange, ...] = ()
    """Memory changes the execute side gave up on since the previous observation (timed out)."""
    recent_input_rate_rps: np.ndarray | None = None
    """The input rate over a shorter window, at the input-rate timestamps: what surges are judged on where
    `input_rate_rps` is smoothed over a minute; None where the backend has only the one rate."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_timestamps_s", frozen_array(self.input_timestamps_s))
        object.__setattr__(self, "input_rate_rps", frozen_array(self.input_rate_rps))
        if len(self.input_timestamps_s) != len(self.input_rate_rps):
            raise ValueError("input rate: timestamps and values of different lengths")
        if self.recent_input_rate_rps is not None:
            object.__setattr__(self, "recent_input_rate_rps", frozen_array(self.recent_input_rate_rps))
            if len(self.recent_input_rate_rps) != len(self.input_timestamps_s):
                raise ValueError("recent input rate: timestamps and values of different lengths")
        if self.latency_ms is not None:
            object.__setattr__(self, "latency_ms", frozen_array(self.latency_ms))
            if len(self.latency_ms) != len(self.input_timestamps_s):
                raise ValueError("latency: timestamps and values of different lengths")


@dataclass(frozen=True)
class MemoryAssessment:
    """The memory side of an Assessment: where the job stands and what other memory levels would give.

    Only the memory-aware policy reads it. `capacities_by_level` holds, for every memory level other than
    the current one that has capacity knowledge, the capacity per scale-out at that level (and
    `recovery_by_level` the predicted recovery of a restart into it, `lag_catch_up_by_level` how long its
    lag stays over the lag SLO after the resume: `Assessment.lag_catch_up_s`).
    """

    level: int | None
    """Current memory level (None: no managed memory)."""
    managed_mb: float
    stateful: bool
    """Whether the job has (or ever showed) a stateful operator."""
    operators: tuple[OperatorState, ...] = ()
    capacities_by_level: dict[int, dict[int, float]] = field(default_factory=dict)
    recovery_by_level: dict[int, dict[int, float]] = field(default_factory=dict)
    lag_catch_up_by_level: dict[int, dict[int, float]] = field(default_factory=dict)
    unreachable_levels: frozenset[int] = frozenset()
    """Levels the job cannot be given now: from a level whose change timed out lately, up."""

    @property
    def stateful_operators(self) -> tuple[OperatorState, ...]:
        return tuple(o for o in self.operators if o.stateful)


@dataclass(frozen=True)
class LatencyAssessment:
    """The latency side of an Assessment (the latency objective): what the job showed in the window, what
    the queueing model says at the running configuration, and how far the raw model has been off."""

    stat: str
    """How the job's latency is read: the window's 'mean' or its 'p99'."""
    shown_ms: float | None
    """The window's latency as `stat` (None: the job's latency is not read)."""
    model_ms: float | None
    """The raw queueing model at the window's load and the running parallelism (None: unknown)."""
    corrected_ms: float | None
    """The model through the correction learned before this window."""
    learned_from: bool
    """Whether this window taught the correction (a steady one: no problems, past the warm-up, no backlog)."""
    windows: int
    """Steady windows the correction has learned from."""
    raw_error_pct: float | None
    """Median |raw model − shown| / shown over the last windows (None before the first)."""
    corrected_error_pct: float | None
    """The same for the correction known before each window (out of sample)."""
    offset_ms: float | None
    """Median of shown − model: the latency outside the operators' queues."""


@dataclass(frozen=True)
class VertexAssessment:
    """One vertex as the per-vertex analysis sees it (rates in records/s; source rates in source records/s)."""

    vertex_id: str
    name: str
    parallelism: int
    keyed: bool
    input_ratio: float
    """Records the vertex receives per source record (DS2's walk over the selectivities)."""
    selectivity: float
    true_rate_rps: float
    """Mean per-subtask true processing rate: records per second of busy time (NaN when unknown)."""
    utilization: float
    """Busy share of the busiest subtask (NaN when Flink reports none)."""
    backpressured: float
    """Backpressured share of the most backpressured subtask."""
    skew: float
    """max / mean of the subtasks' records in (1 = even)."""
    capacity_rps: float
    """Source rate the vertex carries at its parallelism (inf: it is never the limit)."""
    needed_parallelism: int | None = None
    """Parallelism that carries the forecast peak over the horizon, or the window's peak input without a
    forecast (None: unknown or above the max scale-out)."""


@dataclass(frozen=True)
class Assessment:
    """What the analysis concluded from one Observation plus the knowledge.

    Non-empty `problems` mean the data cannot support a scaling decision: the plan must hold.
    """

    time_s: float
    current_scaleout: int
    workload_avg_rps: float
    workload_max_rps: float
    backlog_records: float
    capacities_rps: dict[int, float]
    capacity_sources: dict[int, Literal["observed", "interpolated", "extrapolated", "cache-curve"]]
    capacity_method: str = ""
    forecast_rps: np.ndarray | None = None
    forecast_model: str = ""
    forecast_reason: str = ""
    forecast_wape: float | None = None
    recovery_s: dict[int, float] = field(default_factory=dict)
    lag_catch_up_s: dict[int, float] = field(default_factory=dict)
    """Per candidate: seconds from its restart's resume until the lag is back within the lag SLO (empty
    without one)."""
    warming_up: bool = False
    problems: tuple[str, ...] = ()
    cpu_utilization: float = math.nan
    """Mean CPU load (0..1) over the workers' valid samples of the window: the HPA's metric."""
    worker_throughput_rps: tuple[float, ...] = ()
    """Per worker, mean records/s over the window's valid samples (empty before warm-up)."""
    worker_busy_ratio: tuple[float, ...] = ()
    """Per worker (same order), mean busy share of its time over the same samples (NaN if not reported)."""
    memory: MemoryAssessment | None = None
    """Memory levels and state signals; None when the analysis is not memory-aware."""
    latency: LatencyAssessment | None = None
    """The job's latency against the queueing model; None without the latency objective."""
    capacity_model: str = "job"
    """What bounds the capacity at the current scale-out: 'dag' (a vertex's true rate), 'cores' (a
    TaskManager's core, from its subtasks' busy time) or 'job' (the per-worker CPU lines)."""
    capacity_model_reason: str = ""
    bottleneck_vertex: str | None = None
    """The vertex that limits the job at the current scale-out: the one whose hottest subtask saturates
    first, or, when a TaskManager's core binds first (`capacity_model` 'cores' or 'job'), the busiest vertex;
    None without per-vertex metrics."""
    vertices: tuple[VertexAssessment, ...] = ()
    forecast_upper_rps: np.ndarray | None = None
    """Per second, the forecast raised to its empirical upper bound (how high the load may go)."""
    workload_recent_rps: float = math.nan
    """Mean input rate of the window's last `RECENT_S` seconds: what the load is now, not a minute ago."""
    workload_latest_rps: float = math.nan
    """The window's last input-rate sample. Right after a step the `RECENT_S` mean still mixes in the
    level before it (one surge was sized for 35k rps where 56k arrived), so the surge rule sizes for the
    higher of the two."""
    expected_upper_rps: float = math.nan
    """The highest load the previous forecast's upper bound allowed for those same seconds (NaN when no
    previous forecast covers them): a recent load above it left the forecast interval — a surge."""

    capacity_overestimate: float = 1.0
    """Factor (>= 1) by which the capacity estimates at scale-outs the job was not running have been above
    what those scale-outs showed once they ran (capacity/track_record.py): the plan divides them by it."""

    def __post_init__(self) -> None:
        for name in ("forecast_rps", "forecast_upper_rps"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, frozen_array(getattr(self, name)))

    def capacity(self, scaleout: int) -> float:
        return self.capacities_rps.get(scaleout, float("nan"))

    @property
    def surge_load_rps(self) -> float:
        """What a surge is sized for: the higher of the recent mean and the newest sample (a rate still
        climbing after a step), the mean alone without a newest sample."""
        latest = self.workload_latest_rps
        return max(self.workload_recent_rps, latest) if math.isfinite(latest) else self.workload_recent_rps

    def planned_capacity(self, scaleout: int) -> float:
        """The capacity to plan with: as measured at the running scale-out, elsewhere the model's prediction
        lowered by how far its predictions have been too high (`capacity_overestimate`)."""
        capacity = self.capacity(scaleout)
        return capacity if scaleout == self.current_scaleout else capacity / self.capacity_overestimate

    def most_capacity_scaleout(self, lowest: int, highest: int) -> int | None:
        """The smallest scale-out in [lowest, highest] whose capacity is within `CAPACITY_RESOLUTION` of the
        most any of them has: beyond it more workers add (almost) nothing — a hot key group's subtask, a
        vertex at its max parallelism. None when no capacity is known. The model's predictions are
        compared as they are: lowered by the track record (`planned_capacity`) they would all lose against
        the running scale-out's measured capacity, and the job would stay where it cannot keep up. A capacity
        that is no positive number counts as unknown."""
        known = {n: c for n in range(lowest, highest + 1) if math.isfinite(c := self.capacity(n)) and c > 0}
        if not known:
            return None
        most = max(known.values())
        return min(n for n, c in known.items() if c >= most * (1.0 - CAPACITY_RESOLUTION))


CAPACITY_RESOLUTION = 0.01
"""Capacities closer than this share are equal for the plan: the capacity model's median error is ~1%
(docs/evaluation/dag.md)."""

RECENT_S = 15
"""Seconds the recent input rate averages over (`Assessment.workload_recent_rps`)."""


@dataclass(frozen=True)
class Decision:
    """Target scale-out (or hold) with the rule that decided it and the reasons, for the audit log.

    A memory-aware decision also names the managed memory per slot: `target_managed_mb` None means the
    memory is left as it is (every CPU-only decision).
    """

    time_s: float
    current_scaleout: int
    target_scaleout: int
    rule: str
    reasons: tuple[str, ...] = field(default_factory=tuple)
    current_managed_mb: float | None = None
    target_managed_mb: float | None = None
    target_memory_level: int | None = None
    target_vertex_parallelism: dict[str, int] | None = None
    """Per-vertex granularity: vertex id → parallelism wanted (every vertex of the graph); None at job
    granularity. `target_scaleout` then holds the TaskManagers that carry it."""
    current_vertex_parallelism: dict[str, int] | None = None
    """Per-vertex granularity: vertex id → parallelism running when the decision was taken."""
    vertex_rules: dict[str, str] | None = None
    """Per-vertex granularity: vertex id → the rule that set its parallelism (for the audit log)."""

    @property
    def changes_vertices(self) -> bool:
        """Whether some vertex gets another parallelism (a per-vertex rescale, even at the same TaskManagers)."""
        return self.target_vertex_parallelism is not None and self.target_vertex_parallelism != (
            self.current_vertex_parallelism or {}
        )

    @property
    def changes_memory(self) -> bool:
        return self.target_managed_mb is not None and self.target_managed_mb != self.current_managed_mb

    @property
    def reconfigures(self) -> bool:
        """Whether executing it restarts the job (a new scale-out, new memory, new vertex parallelism)."""
        return self.action != "hold" or self.changes_memory or self.changes_vertices

    @property
    def memory_action(self) -> Literal["hold", "memory_up", "memory_down"]:
        if not self.changes_memory:
            return "hold"
        return "memory_up" if self.target_managed_mb > (self.current_managed_mb or 0.0) else "memory_down"

    @property
    def action(self) -> Literal["hold", "scale_out", "scale_in"]:
        if self.target_scaleout > self.current_scaleout:
            return "scale_out"
        if self.target_scaleout < self.current_scaleout:
            return "scale_in"
        if self.changes_vertices:  # same TaskManagers, other vertex parallelism: adding subtasks or not
            current = self.current_vertex_parallelism or {}
            grows = any(p > current.get(v, 0) for v, p in self.target_vertex_parallelism.items())
            return "scale_out" if grows else "scale_in"
        return "hold"

    def to_dict(self) -> dict[str, object]:
        return (
            {
                "time_s": self.time_s,
                "current_scaleout": self.current_scaleout,
                "target_scaleout": self.target_scaleout,
                "action": self.action,
                "rule": self.rule,
                "reasons": list(self.reasons),
            }
            | self._memory_dict()
            | self._vertex_dict()
        )

    def _vertex_dict(self) -> dict[str, object]:
        """Per-vertex fields only at vertex granularity (job-level audit events stay as they were)."""
        if self.target_vertex_parallelism is None:
            return {}
        return {
            "current_vertex_parallelism": self.current_vertex_parallelism,
            "target_vertex_parallelism": self.target_vertex_parallelism,
            "vertex_rules": self.vertex_rules,
        }

    def _memory_dict(self) -> dict[str, object]:
        """Memory fields only when the decision is memory-aware (CPU-only audit events stay as they were)."""
        if self.current_managed_mb is None and self.target_managed_mb is None:
            return {}
        return {
            "current_managed_mb": self.current_managed_mb,
            "target_managed_mb": self.target_managed_mb,
            "target_memory_level": self.target_memory_level,
            "memory_action": self.memory_action,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Decision:
        return cls(
            time_s=float(data["time_s"]),
            current_scaleout=int(data["current_scaleout"]),
            target_scaleout=int(data["target_scaleout"]),
            rule=str(data["rule"]),
            reasons=tuple(data.get("reasons", ())),
            current_managed_mb=data.get("current_managed_mb"),
            target_managed_mb=data.get("target_managed_mb"),
            target_memory_level=data.get("target_memory_level"),
            target_vertex_parallelism=_int_map(data.get("target_vertex_parallelism")),
            current_vertex_parallelism=_int_map(data.get("current_vertex_parallelism")),
            vertex_rules=None if data.get("vertex_rules") is None else dict(data["vertex_rules"]),
        )


def _int_map(data: dict | None) -> dict[str, int] | None:
    return None if data is None else {str(k): int(v) for k, v in data.items()}
