"""Which workers (TaskManager pods) exist, in subtask order, and how much each can process.

Reactive mode gives every new pod a new name and, on scale-in, the twin removes the newest pods, so a
worker keeps its subtask index (position) for its whole life. Each pod runs on hardware of its own speed,
drawn once per pod name: the same pod always has the same speed, whatever the order of rescales.

A stateful job's workers also depend on the managed memory per slot and on their key share (the part of
the state each must cache): `simulator.memory_model`. A memory change restarts the TaskManagers in place
(same names, same hardware), so only the memory part of their capacity changes.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from simulator.memory_model import PROFILES, StateProfile, capacity_factors
from simulator.skew import job_capacity_rps, subtask_shares

_SPEED_BLOCK = 64  # speeds are drawn in fixed blocks so pod k's speed never depends on call order


class WorkerInfo(NamedTuple):
    worker_id: str
    position: int
    created_s: int


class Deployment:
    """The current workers plus everything needed to say which worker was where at any past instant."""

    def __init__(
        self,
        key_counts: np.ndarray,
        speed_rng: np.random.Generator,
        speed_cov: float,
        profile: StateProfile = PROFILES["stateless"],
        managed_mb: float = 0.0,
    ) -> None:
        # records/s of a speed-1.0 worker; every capacity is linear in it, so the twin sizes it after creation
        self.worker_capacity_rps = 1.0
        self.profile = profile
        self.managed_mb = managed_mb
        """Managed memory per slot of the current workers."""
        self.reference_managed_mb = managed_mb
        """The memory the job started with: the yardstick for sizing and floors."""
        self._key_counts = key_counts
        self._speed_rng = speed_rng
        self._speed_sigma = math.sqrt(math.log1p(speed_cov**2))
        self._speed_pool: list[float] = []
        self._workers: list[WorkerInfo] = []
        self._speeds: list[float] = []
        self._next_number = 1
        self._position_history: list[list[WorkerInfo]] = []

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

    def shares(self) -> np.ndarray:
        """Input share of each worker at the current size (Flink's key-group ranges)."""
        return subtask_shares(self._key_counts, self.size)

    def capacities_rps(self) -> np.ndarray:
        """Saturation throughput of each current worker."""
        factors = capacity_factors(self.profile, self.managed_mb, self.shares())
        return self.worker_capacity_rps * np.asarray(self._speeds) * factors

    def capacity_rps_for(self, n: int, managed_mb: float | None = None) -> float:
        """Job capacity if resized to n now (at `managed_mb` per slot, default the current memory): the
        oldest n workers, or these plus the next new pods."""
        speeds = self._speeds[:n]
        number = self._next_number
        while len(speeds) < n:
            speeds.append(self.speed_of(number))
            number += 1
        return self._capacity_of(speeds, self.managed_mb if managed_mb is None else managed_mb)

    def reference_capacity_rps(self, n: int) -> float:
        """Job capacity of a fresh n-worker deployment (pods tm-0001..n) at the starting memory."""
        return self._capacity_of([self.speed_of(k) for k in range(1, n + 1)], self.reference_managed_mb)

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

    def _capacity_of(self, speeds: list[float], managed_mb: float) -> float:
        shares = subtask_shares(self._key_counts, len(speeds))
        factors = capacity_factors(self.profile, managed_mb, shares)
        return job_capacity_rps(shares, self.worker_capacity_rps * np.asarray(speeds) * factors)
