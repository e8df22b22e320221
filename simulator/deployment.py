"""Which workers (TaskManager pods) exist, in subtask order, and how much each subtask of the job can do.

Reactive mode gives every new pod a new name and, on scale-in, the twin removes the newest pods, so a
worker keeps its subtask index (position) for its whole life. Each pod runs on hardware of its own speed,
drawn once per pod name: the same pod always has the same speed, whatever the order of rescales. Pod i
holds subtask i of every vertex of the topology (one slot, slot sharing), all on its one core.

Per vertex v and subtask i the job's source rate r loads the subtask with busy time
r · a_v · share_v,i · cost_v,i / (scale · speed_i) + overhead_v (seconds per second), where a_v is the
vertex's input ratio (records per source record), share_v,i its subtask's share of the vertex's input (key
groups for a keyed input, even otherwise) and scale the records/s a speed-1.0 worker processes of a
cost-1.0 vertex (`worker_capacity_rps`, sized from the trace). The job sustains r while every subtask's
busy time stays ≤ 1 s/s and every TaskManager's CPU demand (busy time × CPU share, plus overheads) stays
≤ one core; the first limit reached is the bottleneck.

Per-vertex parallelism (the adaptive scheduler, `vertex_parallelism` set): vertex v runs p_v subtasks and
slot sharing puts subtask i of every vertex with p_v > i into slot i, so the job needs max p_v slots, one
TaskManager (one core) each. A slot's core is shared by the subtasks in it, so a slot holding subtask 0 of
every vertex binds before one that holds only the widest vertex's; the per-subtask overheads (busy time,
CPU, memory) are paid only by subtasks that exist. A forward edge between vertices of different
parallelism is pointwise in Flink: the receiving vertex's share is then even.

A stateful job's state vertex also depends on the managed memory per slot and on its key share (the part
of the state each subtask must cache): `simulator.memory_model`. A memory change restarts the
TaskManagers in place (same names, same hardware), so only the memory part of their capacity changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from simulator.memory_model import PROFILES, StateProfile, capacity_factors
from simulator.skew import KeyGroups, subtask_shares
from simulator.topology import Topology

_SPEED_BLOCK = 64  # speeds are drawn in fixed blocks so pod k's speed never depends on call order
CPU_BOTTLENECK = -1
"""`JobLoad.bottleneck` when a TaskManager's core, not one vertex, limits the job."""


class WorkerInfo(NamedTuple):
    worker_id: str
    position: int
    created_s: int


@dataclass(frozen=True)
class JobLoad:
    """What a deployment does per source record: the coefficients of the twin's per-second step.

    `capacity_rps` (source records/s) is the rate at which the first limit binds and `bottleneck` the
    index of the vertex that binds first (or CPU_BOTTLENECK).
    """

    shares: np.ndarray
    """(vertices × workers): each subtask's share of its vertex's input."""
    subtask_capacity_rps: np.ndarray
    """(vertices × workers): source rate at which the subtask is busy all the time (inf: no input)."""
    busy_per_record: np.ndarray
    """(vertices × workers): busy seconds per source record, overhead excluded."""
    overhead_busy: np.ndarray
    """(vertices,): fixed busy share of each subtask."""
    cpu_share: np.ndarray
    """(vertices,)"""
    overhead_cpu: float
    """Fixed CPU (cores) of one TaskManager's subtasks."""
    source_shares: np.ndarray
    """(workers,): each TaskManager's share of the records the source reads."""
    state_shares: np.ndarray
    """(workers,): each subtask's share of the stateful vertex's input."""
    capacity_rps: float
    bottleneck: int
    present: np.ndarray | None = None
    """(vertices × workers): which subtasks exist (per-vertex parallelism); None: every vertex on every
    worker (reactive mode)."""
    overhead_cpu_by_vertex: np.ndarray | None = None
    """(vertices,): fixed CPU of one subtask of each vertex (with `present`)."""

    @property
    def parallelism(self) -> tuple[int, ...]:
        """Subtasks per vertex."""
        if self.present is None:
            return (self.busy_per_record.shape[1],) * self.busy_per_record.shape[0]
        return tuple(int(p) for p in self.present.sum(axis=1))

    @property
    def overhead_busy_matrix(self) -> np.ndarray:
        """(vertices × workers): fixed busy share of each subtask (0 where none exists)."""
        if self.present is None:
            return np.broadcast_to(self.overhead_busy[:, None], self.busy_per_record.shape)
        return self.overhead_busy[:, None] * self.present

    @property
    def cpu_per_record(self) -> np.ndarray:
        """(workers,): CPU cores per source record of each TaskManager."""
        return self.cpu_share @ self.busy_per_record

    @property
    def fixed_cpu(self) -> float | np.ndarray:
        """CPU cores each TaskManager uses at zero load (overheads): one number in reactive mode, one per
        TaskManager with per-vertex parallelism."""
        if self.present is None:
            return float(self.cpu_share @ self.overhead_busy) + self.overhead_cpu
        return self.cpu_share @ self.overhead_busy_matrix + self.overhead_cpu_by_vertex @ self.present


class Deployment:
    """The current workers plus everything needed to say which worker was where at any past instant."""

    def __init__(
        self,
        topology: Topology,
        key_groups: dict[int, KeyGroups],
        speed_rng: np.random.Generator,
        speed_cov: float,
        profile: StateProfile = PROFILES["stateless"],
        managed_mb: float = 0.0,
    ) -> None:
        # records/s of a speed-1.0 worker on a cost-1.0 vertex; capacities are linear in it, so the twin
        # sizes it after creation
        self.worker_capacity_rps = 1.0
        self.topology = topology
        self.profile = profile
        self.managed_mb = managed_mb
        """Managed memory per slot of the current workers."""
        self.reference_managed_mb = managed_mb
        """The memory the job started with: the yardstick for sizing and floors."""
        self._key_groups = key_groups
        self._ratios = np.array(topology.input_ratios)
        self._speed_rng = speed_rng
        self._speed_sigma = math.sqrt(math.log1p(speed_cov**2))
        self._speed_pool: list[float] = []
        self._workers: list[WorkerInfo] = []
        self._speeds: list[float] = []
        self._next_number = 1
        self._position_history: list[list[WorkerInfo]] = []
        self.vertex_parallelism: tuple[int, ...] | None = None
        """Subtasks per vertex (per-vertex granularity; the workers are then max of it); None: reactive mode."""

    @property
    def size(self) -> int:
        return len(self._workers)

    @property
    def workers(self) -> tuple[WorkerInfo, ...]:
        return tuple(self._workers)

    def resize(self, n: int, t_s: int) -> None:
        """Remove the newest workers or add new pods (created at t_s) until there are n."""
        while len(self._workers) > n:
            self._workers.pop()
            self._speeds.pop()
        while len(self._workers) < n:
            number = self._next_number
            self._next_number += 1
            worker = WorkerInfo(f"tm-{number:04d}", len(self._workers), t_s)
            self._workers.append(worker)
            self._speeds.append(self.speed_of(number))
            if worker.position == len(self._position_history):
                self._position_history.append([])
            self._position_history[worker.position].append(worker)

    def shares(self, n: int | None = None) -> np.ndarray:
        """(vertices × n): each subtask's share of its vertex's input at parallelism n (default: now)."""
        n = self.size if n is None else n
        rows = []
        for v, vertex in enumerate(self.topology.vertices):
            if vertex.keyed:
                rows.append(subtask_shares(self._key_groups[v].loads, n))
            elif vertex.ship == "BROADCAST":
                rows.append(np.ones(n))
            elif vertex.ship == "FORWARD" and len(vertex.inputs) == 1:
                rows.append(rows[self.topology.index(vertex.inputs[0])])
            else:
                rows.append(np.full(n, 1.0 / n))
        return np.array(rows)

    def load(self) -> JobLoad:
        """The current deployment's coefficients."""
        if self.vertex_parallelism is not None:
            return self._vertex_load_of(self._speeds, self.managed_mb, self.vertex_parallelism)
        return self._load_of(self._speeds, self.managed_mb)

    def vertex_shares(self, parallelism: tuple[int, ...]) -> np.ndarray:
        """(vertices × max parallelism): each subtask's share of its vertex's input, 0 where none exists."""
        n = max(parallelism)
        rows = np.zeros((len(self.topology.vertices), n))
        for v, (vertex, p) in enumerate(zip(self.topology.vertices, parallelism, strict=True)):
            if vertex.keyed:
                rows[v, :p] = subtask_shares(self._key_groups[v].loads, p)
            elif vertex.ship == "BROADCAST":
                rows[v, :p] = 1.0
            elif vertex.ship == "FORWARD" and len(vertex.inputs) == 1:
                upstream = self.topology.index(vertex.inputs[0])
                rows[v] = (
                    rows[upstream] if parallelism[upstream] == p else np.where(np.arange(n) < p, 1 / p, 0)
                )
            else:
                rows[v, :p] = 1.0 / p
        return rows

    def _vertex_load_of(
        self, speeds: list[float], managed_mb: float, parallelism: tuple[int, ...]
    ) -> JobLoad:
        """`_load_of` with per-vertex parallelism: subtasks exist only where p_v > slot index."""
        topology, n = self.topology, len(speeds)
        shares = self.vertex_shares(parallelism)
        present = np.arange(n)[None, :] < np.array(parallelism)[:, None]
        stateful = topology.stateful_index
        unit_rps = self.worker_capacity_rps * np.asarray(speeds)
        overhead = np.array([v.overhead_busy_ms / 1000.0 for v in topology.vertices])
        capacity = np.full((len(topology.vertices), n), math.inf)
        for v, (vertex, p) in enumerate(zip(topology.vertices, parallelism, strict=True)):
            subtask_rps = unit_rps[:p] / vertex.cost
            if v == stateful:
                subtask_rps = subtask_rps * capacity_factors(self.profile, managed_mb, shares[v, :p])
            if vertex.cost_per_1k_keys_held > 0:
                held = self._key_groups[v].keys_held(p)
                subtask_rps = subtask_rps / (1.0 + vertex.cost_per_1k_keys_held * held / 1000.0)
            load = self._ratios[v] * shares[v, :p]
            with np.errstate(divide="ignore"):
                capacity[v, :p] = np.where(load > 0, (1.0 - overhead[v]) * subtask_rps / load, math.inf)
        overhead_cpu = np.array([v.overhead_cpu for v in topology.vertices])
        cpu_share = np.array([v.cpu_share for v in topology.vertices])
        spare_cpu = 1.0 - cpu_share @ (overhead[:, None] * present) - overhead_cpu @ present
        return _job_load(
            topology, shares, capacity, overhead, spare_cpu, float(overhead_cpu.sum()), present, overhead_cpu
        )

    def vertex_capacity_rps_for(self, parallelism: tuple[int, ...]) -> float:
        """Job capacity if the vertices ran at `parallelism` now (the oldest workers, then new pods)."""
        speeds = self._speeds_for(max(parallelism))
        return self._vertex_load_of(speeds, self.managed_mb, tuple(parallelism)).capacity_rps

    def vertex_limits_rps_for(self, parallelism: tuple[int, ...]) -> np.ndarray:
        """Per vertex, the source rate at which its hottest subtask is busy all the time at `parallelism`
        when every subtask has a core of its own (no slot sharing)."""
        speeds = self._speeds_for(max(parallelism))
        return self._vertex_load_of(speeds, self.managed_mb, tuple(parallelism)).subtask_capacity_rps.min(
            axis=1
        )

    def _speeds_for(self, n: int) -> list[float]:
        """Speeds of the oldest n workers, or these plus the next new pods."""
        speeds = self._speeds[:n]
        number = self._next_number
        while len(speeds) < n:
            speeds.append(self.speed_of(number))
            number += 1
        return speeds

    def capacities_rps(self) -> np.ndarray:
        """Each current worker's unit capacity: records/s of a cost-1.0 vertex, memory effects included."""
        stateful = self.topology.stateful_index
        shares = (
            self.shares() if self.vertex_parallelism is None else self.vertex_shares(self.vertex_parallelism)
        )
        factors = capacity_factors(self.profile, self.managed_mb, shares[stateful])
        return self.worker_capacity_rps * np.asarray(self._speeds) * factors

    def capacity_rps_for(self, n: int, managed_mb: float | None = None) -> float:
        """Job capacity if resized to n now (at `managed_mb` per slot, default the current memory): the
        oldest n workers, or these plus the next new pods."""
        speeds = self._speeds_for(n)
        return self._load_of(speeds, self.managed_mb if managed_mb is None else managed_mb).capacity_rps

    def reference_capacity_rps(self, n: int) -> float:
        """Job capacity of a fresh n-worker deployment (pods tm-0001..n) at the starting memory."""
        speeds = [self.speed_of(k) for k in range(1, n + 1)]
        return self._load_of(speeds, self.reference_managed_mb).capacity_rps

    def workers_at(self, t_s: int, size: int) -> list[WorkerInfo]:
        """The `size` workers deployed at a past instant t_s: the newest pod created by then at each position."""
        return [
            next(w for w in reversed(self._position_history[position]) if w.created_s <= t_s)
            for position in range(size)
        ]

    def speed_of(self, number: int) -> float:
        """Speed factor of pod tm-<number>: lognormal with mean 1, fixed for the pod's life."""
        while len(self._speed_pool) < number:
            sigma = self._speed_sigma
            block = self._speed_rng.lognormal(-(sigma**2) / 2, sigma, size=_SPEED_BLOCK)
            self._speed_pool.extend(block.tolist())
        return self._speed_pool[number - 1]

    def _load_of(self, speeds: list[float], managed_mb: float) -> JobLoad:
        topology, n = self.topology, len(speeds)
        shares = self.shares(n)
        stateful = topology.stateful_index
        unit_rps = self.worker_capacity_rps * np.asarray(speeds)  # records/s of a cost-1.0 vertex
        overhead = np.array([v.overhead_busy_ms / 1000.0 for v in topology.vertices])
        capacity = np.empty((len(topology.vertices), n))
        for v, vertex in enumerate(topology.vertices):
            subtask_rps = unit_rps / vertex.cost
            if v == stateful:
                subtask_rps = subtask_rps * capacity_factors(self.profile, managed_mb, shares[v])
            if vertex.cost_per_1k_keys_held > 0:
                held = self._key_groups[v].keys_held(n)
                subtask_rps = subtask_rps / (1.0 + vertex.cost_per_1k_keys_held * held / 1000.0)
            load = self._ratios[v] * shares[v]
            with np.errstate(divide="ignore"):
                capacity[v] = np.where(load > 0, (1.0 - overhead[v]) * subtask_rps / load, math.inf)
        cpu_share = np.array([v.cpu_share for v in topology.vertices])
        overhead_cpu = sum(v.overhead_cpu for v in topology.vertices)
        spare_cpu = 1.0 - float(cpu_share @ overhead) - overhead_cpu
        return _job_load(topology, shares, capacity, overhead, spare_cpu, overhead_cpu)


def _job_load(
    topology: Topology,
    shares: np.ndarray,
    capacity: np.ndarray,
    overhead: np.ndarray,
    spare_cpu: float | np.ndarray,
    overhead_cpu: float,
    present: np.ndarray | None = None,
    overhead_cpu_by_vertex: np.ndarray | None = None,
) -> JobLoad:
    """The coefficients from each subtask's capacity: the first limit that binds, a vertex or a core
    (`spare_cpu`: the core each TaskManager has left beside its overheads, one number or one per worker)."""
    with np.errstate(divide="ignore"):
        busy_per_record = np.where(np.isfinite(capacity), (1.0 - overhead[:, None]) / capacity, 0.0)
    cpu_share = np.array([v.cpu_share for v in topology.vertices])
    vertex_limit = capacity.min(axis=1)
    bottleneck = int(np.argmin(vertex_limit))
    capacity_rps = float(vertex_limit[bottleneck])
    cpu_per_record = cpu_share @ busy_per_record
    with np.errstate(divide="ignore"):
        cpu_limit = float(np.min(np.where(cpu_per_record > 0, spare_cpu / cpu_per_record, math.inf)))
    if cpu_limit < capacity_rps * (1.0 - 1e-9):  # the core binds before any one vertex does
        capacity_rps, bottleneck = max(cpu_limit, 0.0), CPU_BOTTLENECK
    source = next(i for i, v in enumerate(topology.vertices) if not v.inputs)
    stateful = topology.stateful_index
    return JobLoad(
        shares,
        capacity,
        busy_per_record,
        overhead,
        cpu_share,
        overhead_cpu,
        shares[source],
        shares[stateful],
        capacity_rps,
        bottleneck,
        present,
        overhead_cpu_by_vertex,
    )
