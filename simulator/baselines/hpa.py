"""The Kubernetes Horizontal Pod Autoscaler on CPU, as its controller computes replicas.

Every sync period (15 s; the loop runs that often for this policy):

- ratio = average CPU utilization of the workers / target; within the tolerance (|ratio − 1| ≤ 0.1) the
  recommendation is the current count, otherwise ceil(current × ratio);
- scale-down stabilization: the applied count never falls below the highest recommendation of the last
  5 minutes; scale-up has no window (the default `behavior`);
- default scale-up rate: at most max(2 × current, current + 4) per 15 s period.

Pods whose metrics are missing or still warming up are not counted: the shared bad-data guard holds while
the job restarts, and the analysis drops samples from the warm-up after a (re)start (standing in for the
HPA's CPU initialization period).

The HPA's utilization is the container's CPU usage over its *request*. The loop sees each worker's CPU load
(0..1), a share of the container's limit (simulator/params.py), so usage / request = load × limit / request
(`request_per_load`): with a limit above the request it exceeds 100 % when the workers are saturated, and
a target may exceed 100 % too. With request = limit (1.0) the utilization is the load itself.
"""

from __future__ import annotations

import math
from collections import deque

from mape.knowledge import Knowledge
from messages.types import Assessment


class HpaPolicy:
    """One HPA object; it keeps its own recommendation history like the controller does (not persisted)."""

    own_stabilization = True  # the scale-down window replaces the shared plan guard

    def __init__(
        self,
        target_utilization: float,
        tolerance: float = 0.1,
        scale_down_window_s: float = 300.0,
        scale_up_percent: float = 100.0,
        scale_up_pods: int = 4,
        request_per_load: float = 1.0,
    ) -> None:
        self.name = f"hpa-{target_utilization * 100:g}"
        self.target_utilization = target_utilization
        self.request_per_load = request_per_load
        self.tolerance = tolerance
        self.scale_down_window_s = scale_down_window_s
        self.scale_up_percent = scale_up_percent
        self.scale_up_pods = scale_up_pods
        self._recommendations: deque[tuple[float, int]] = deque()

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]:
        now_s, current = assessment.time_s, assessment.current_scaleout
        utilization = assessment.cpu_utilization * self.request_per_load
        if not math.isfinite(utilization):
            return current, "hpa-no-metrics", ("no worker CPU past the warm-up in this window",)
        ratio = utilization / self.target_utilization
        seen = f"CPU {utilization:.1%} of the request / target {self.target_utilization:.0%} = {ratio:.3f}"
        if abs(ratio - 1.0) <= self.tolerance:
            recommended = current
            seen += f" within tolerance {self.tolerance:.0%}"
        else:
            recommended = math.ceil(current * ratio)

        while self._recommendations and self._recommendations[0][0] <= now_s - self.scale_down_window_s:
            self._recommendations.popleft()
        floor = max([recommended, *(r for _, r in self._recommendations)])
        self._recommendations.append((now_s, recommended))

        target = recommended if recommended > current else min(current, floor)
        reasons = [
            seen,
            f"recommended {recommended}, highest of the last {self.scale_down_window_s:.0f} s {floor}",
        ]
        if target > current:
            limit = max(math.floor(current * (1 + self.scale_up_percent / 100)), current + self.scale_up_pods)
            if target > limit:
                reasons.append(f"{target} limited to {limit} by the scale-up rate")
                target = limit
            return target, "hpa-scale-up", tuple(reasons)
        if target < current:
            return target, "hpa-scale-down", tuple(reasons)
        rule = "hpa-stabilized" if recommended < current else "hpa-hold"
        return current, rule, tuple(reasons)
