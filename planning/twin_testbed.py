"""The DAG twin as a testbed: a fresh job per deployment whose source reads the injected rates from a
Kafka log (pending records = the consumer lag; achieved rate = records the job read per second).

The twin's trace is fixed when it is built, so each `run` rebuilds the twin on the whole injection
history so far (deterministic: same seed, same pods) and reads the new phases; a test is a few hundred
simulated seconds, so this stays well under a second per estimate.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from planning.testbed import Phase, PhaseReading, VertexReading
from simulator.params import TwinParams
from simulator.topology import Topology
from simulator.twin import Twin, max_parallelism_of


class TwinTestbed:
    """Reactive-mode testbed: `slots` TaskManagers of one slot each, every vertex at that parallelism."""

    def __init__(
        self, topology: Topology, params: TwinParams, seed: int = 0, max_rate_rps: float | None = None
    ) -> None:
        if params.worker_capacity_rps is None:
            raise ValueError("the testbed twin needs params.worker_capacity_rps (its hardware) set")
        self.topology = topology
        self.params = params
        self.seed = seed
        self._max_rate_rps = max_rate_rps
        self._slots = 0
        self._memory_mb = params.managed_mb
        self._seconds: list[float] = []
        self.twin: Twin | None = None

    @property
    def max_rate_rps(self) -> float:
        """Explicit, or 1.5 times what the deployed job can carry (a generator well past saturation)."""
        if self._max_rate_rps is not None:
            return self._max_rate_rps
        return 1.5 * self.true_mst_rps(self._slots, self._memory_mb)

    @property
    def max_slots(self) -> int:
        """The largest configuration the twin runs (its max parallelism)."""
        return max_parallelism_of(self.params, self.topology)

    def deploy(self, slots: int, memory_mb: float) -> None:
        self._slots, self._memory_mb, self._seconds = slots, memory_mb, []
        self.twin = None

    def true_mst_rps(self, slots: int, memory_mb: float) -> float:
        """Ground truth: the source rate a fresh deployment of this configuration sustains."""
        return self._build([0.0], slots, memory_mb).true_capacity_rps()

    def true_min_slots(self, rate_rps: float, memory_mb: float) -> int | None:
        """Ground truth: the fewest slots whose fresh deployment sustains `rate_rps` (None: not even the
        twin's largest)."""
        return next(
            (n for n in range(1, self.max_slots + 1) if self.true_mst_rps(n, memory_mb) >= rate_rps), None
        )

    def true_vertex_limits_rps(
        self, parallelism: dict[str, int], slots: int, memory_mb: float
    ) -> dict[str, float]:
        """Ground truth of a per-vertex requirement: per vertex the source rate its hottest subtask carries
        (a core each; vertices not named run at `slots`)."""
        return self._build([0.0], slots, memory_mb).true_vertex_limits_rps_for(parallelism)

    def backlog_at_rate(self, slots: int, memory_mb: float, rate_rps: float, duration_s: int) -> np.ndarray:
        """Consumer lag, second by second, of a fresh deployment fed `rate_rps` for `duration_s`."""
        twin = self._build([rate_rps] * duration_s, slots, memory_mb)
        twin.advance_to(duration_s)
        return np.array(twin.history.view("lag_at"))

    def run(self, phases: list[Phase]) -> list[PhaseReading]:
        if self._slots < 1:
            raise RuntimeError("deploy a configuration before running phases")
        bounds = []
        for phase in phases:
            start = len(self._seconds)
            self._seconds.extend([phase.rate_rps] * max(1, math.ceil(phase.duration_s)))
            bounds.append((start, len(self._seconds), phase.rate_rps))
        twin = self.twin = self._build(self._seconds, self._slots, self._memory_mb)
        twin.advance_to(len(self._seconds))
        processed = twin.history.view("processed")
        lag = twin.history.view("lag_at")
        end_lag = twin.backlog_records
        readings = []
        for start, end, rate in bounds:
            achieved = float(processed[start:end].mean())
            pending_end = float(lag[end]) if end < len(lag) else float(end_lag)
            vertices = self._vertices(twin, achieved)
            cpu = float(np.nanmean(twin.history.view("cpu")[start:end, : twin.parallelism]))
            readings.append(PhaseReading(rate, achieved, float(lag[start]), pending_end, vertices, cpu))
        return readings

    def _vertices(self, twin: Twin, source_rps: float) -> tuple[VertexReading, ...]:
        load = twin.load
        ratios = self.topology.input_ratios
        readings = []
        for v, vertex in enumerate(self.topology.vertices):
            busy = np.minimum(source_rps * load.busy_per_record[v] + load.overhead_busy[v], 1.0)
            busyness = math.nan if vertex.legacy_source else float(np.mean(busy))
            readings.append(
                VertexReading(
                    vertex.name,
                    source_rps * ratios[v],
                    busyness,
                    twin.parallelism,
                    tuple(float(x) for x in load.shares[v]),
                    vertex.max_parallelism if vertex.keyed else 0,
                    () if vertex.legacy_source else tuple(float(b) for b in busy),
                )
            )
        return tuple(readings)

    def _build(self, seconds: list[float], slots: int, memory_mb: float) -> Twin:
        params = replace(self.params, managed_mb=memory_mb)
        return Twin(np.array(seconds), params, parallelism=slots, seed=self.seed, topology=self.topology)
