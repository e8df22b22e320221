"""DS2 (Kalavri et al., OSDI 2018): reactive scaling to the true processing rate, for a one-vertex job.

A worker's true rate is the records it processed per unit of *useful* (busy) time: throughput / busy ratio
(Flink's busyTimeMsPerSecond). The optimal parallelism is ceil(source rate × target ratio / average true
rate per instance), computed in one step from any starting point, over- or under-provisioned.

DS2 assumes no skew: it averages the instances' true rates, so under key skew it proposes the
configuration that would suffice without skew (as the paper reports), which may not carry the load.
Warm-up after a rescale is the shared plan guard plus the analysis dropping samples from the warm-up.
Changes by one worker are ignored while the job keeps up (§4.2, "minor changes", as at vertex granularity:
`baselines.ds2_min_change`).
"""

from __future__ import annotations

import math

from mape.knowledge import Knowledge
from messages.types import Assessment


def true_rates_rps(throughput_rps: tuple[float, ...], busy_ratio: tuple[float, ...]) -> list[float]:
    """Per worker, records per busy second; workers without busy time (undefined rate) are left out."""
    return [
        t / b
        for t, b in zip(throughput_rps, busy_ratio, strict=True)
        if math.isfinite(t) and math.isfinite(b) and b > 0
    ]


BEHIND_S = 30.0
"""A backlog above this many seconds of input means the job falls behind: minor changes count then."""


class Ds2Policy:
    name = "ds2"

    def __init__(self, target_ratio: float = 1.0, min_change: int = 1) -> None:
        self.target_ratio = target_ratio
        self.min_change = min_change
        """§4.2: changes by at most this many workers are ignored (noisy metrics) while the job keeps up."""

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]:
        current = assessment.current_scaleout
        rates = true_rates_rps(assessment.worker_throughput_rps, assessment.worker_busy_ratio)
        if not rates:
            return current, "ds2-no-rates", ("no worker with busy time past the warm-up",)
        per_instance_rps = sum(rates) / len(rates)
        source_rps = assessment.workload_avg_rps * self.target_ratio
        optimal = max(1, math.ceil(source_rps / per_instance_rps))
        behind = assessment.backlog_records > BEHIND_S * max(assessment.workload_avg_rps, 1.0)
        if 0 < abs(optimal - current) <= self.min_change and not behind:
            return (
                current,
                "ds2-minor-change",
                (f"{current} → {optimal} is a minor change (at most {self.min_change}), ignored",),
            )
        return (
            optimal,
            "ds2-true-rate",
            (
                f"source {source_rps:.0f} rps / true rate {per_instance_rps:.0f} rps per instance "
                f"(mean of {len(rates)}) → {optimal}",
            ),
        )
