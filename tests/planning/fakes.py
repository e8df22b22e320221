"""A testbed whose job has a known MST: what the source reads is min(injected + pending, MST) a second."""

from __future__ import annotations

from collections.abc import Callable

from planning.testbed import Phase, PhaseReading


class CurveTestbed:
    """MST = curve(slots, memory_mb); pending records carry over between phases of one deployment."""

    def __init__(self, curve: Callable[[int, float], float], max_rate_rps: float = 1e9) -> None:
        self.curve = curve
        self.max_rate_rps = max_rate_rps
        self.deployments: list[tuple[int, float]] = []
        self.seconds = 0.0
        self._mst = 0.0
        self._pending = 0.0

    def deploy(self, slots: int, memory_mb: float) -> None:
        self.deployments.append((slots, memory_mb))
        self._mst, self._pending = self.curve(slots, memory_mb), 0.0

    def run(self, phases: list[Phase]) -> list[PhaseReading]:
        readings = []
        for phase in phases:
            start = self._pending
            read = min(phase.rate_rps + start / phase.duration_s, self._mst)
            self._pending = start + (phase.rate_rps - read) * phase.duration_s
            self.seconds += phase.duration_s
            readings.append(PhaseReading(phase.rate_rps, read, start, self._pending))
        return readings
