"""The reactive policy: the smallest scale-out that carries what was just observed.

Capacity must exceed the window's average workload plus the backlog drained over `drain_time_s`, times
(1 + headroom). It scales after the load has arrived; the proactive policy improves on it.
"""

from __future__ import annotations

from mape.knowledge import Knowledge
from messages.types import Assessment


class ReactivePolicy:
    name = "reactive"

    def __init__(self, max_scaleout: int, drain_time_s: float, headroom: float = 0.0) -> None:
        self.max_scaleout = max_scaleout
        self.drain_time_s = drain_time_s
        self.headroom = headroom

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]:
        load_rps = assessment.workload_avg_rps + assessment.backlog_records / self.drain_time_s
        needed_rps = (1 + self.headroom) * load_rps
        needs = (
            f"needed {needed_rps:.0f} rps = (1 + {self.headroom:g}) × (average "
            f"{assessment.workload_avg_rps:.0f} rps + backlog {assessment.backlog_records:.0f} records / "
            f"{self.drain_time_s:.0f} s)"
        )
        for scaleout in range(1, self.max_scaleout + 1):
            capacity = assessment.capacity(scaleout)
            if capacity > needed_rps:
                return scaleout, "smallest-sufficient", (needs, f"capacity({scaleout}) = {capacity:.0f} rps")
        return self.max_scaleout, "max-scaleout", (needs, "no scale-out up to the maximum carries it")
