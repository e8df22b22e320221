"""The two seams between the loop and the world: where metrics come from, where scaling goes.

The loop never knows whether it talks to Prometheus/Kubernetes or to the digital twin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np

from messages.types import Observation


class MetricsSource(Protocol):
    """Monitor side: a snapshot of the last `window_s` seconds ending at `now_s`."""

    def observe(self, now_s: float, window_s: float) -> Observation: ...


@runtime_checkable
class RateSource(MetricsSource, Protocol):
    """A source that can also read the input rate alone, cheaply: timestamps and rates of the last
    `window_s` seconds (the surge watch reads it between iterations; without it there is no watch)."""

    def input_rate(self, now_s: float, window_s: float) -> tuple[np.ndarray, np.ndarray]: ...


class NotApplied(RuntimeError):
    """A target deliberately did not apply the decision (recommend-only, dry run, paused or blocked): a
    recommendation, not a failure; the loop audits it as such and counts no execute error."""


class ScalingTarget(Protocol):
    """Execute side: request a scale-out; the job restarts and reports the new parallelism later."""

    def scale_to(self, scaleout: int, now_s: float) -> None: ...


class MemoryScalingTarget(ScalingTarget, Protocol):
    """Execute side of memory levels: restart the job at `scaleout` workers with `managed_mb` managed memory
    per slot (0 = none). Costs a restart like a rescale, even when the scale-out stays."""

    def reconfigure(self, scaleout: int, managed_mb: float, now_s: float) -> None: ...

    def configured_managed_mb(self) -> float | None:
        """The managed memory TaskManagers started from now on get (None: unknown). It differs from what
        runs after a change that never took effect (its pods never came up): a decision for the memory
        that runs must then reconfigure too, or every later TaskManager starts with the failed one."""
        ...


class VertexScalingTarget(ScalingTarget, Protocol):
    """Execute side of per-vertex parallelism (Flink's adaptive scheduler): run `taskmanagers` TaskManagers
    and every vertex at its parallelism in `vertex_parallelism` (vertex id → parallelism), in one rescale.
    Adds TaskManagers before and removes them only after the slots are free; the measured downtime comes
    back as a `CompletedRescale` in a later Observation."""

    def scale_vertices(
        self, vertex_parallelism: Mapping[str, int], taskmanagers: int, now_s: float
    ) -> None: ...


class Clock(Protocol):
    """Seconds since the epoch (UTC), or virtual seconds in the twin."""

    def now(self) -> float: ...
